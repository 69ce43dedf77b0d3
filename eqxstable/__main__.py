"""`python -m eqxstable doctor (SCRIPT | -m MODULE) [ARGS...]`."""

from ._cli import main


raise SystemExit(main())

"""`python -m eqxstable doctor SCRIPT [ARGS...]`."""

from ._cli import main


raise SystemExit(main())

"""`eqxstable doctor`: see `README.md` beside this file."""

from ._observe import Observer as Observer, PREFERRED_HOOKS as PREFERRED_HOOKS
from ._run import (
    check_module as check_module,
    check_output as check_output,
    check_script as check_script,
    run as run,
    write_report as write_report,
)

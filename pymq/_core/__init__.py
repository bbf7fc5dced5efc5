"""pymq's compiled core: the record codec, mapped segments and the append path.

Everything here depends on nothing above it in pymq but ``pymq.errors`` and
``pymq.status``. The extension modules are required (there is no pure-Python twin);
``COMPILED`` is a marker the tests check.
"""

from pymq._core import record as _record

COMPILED = _record.__file__.endswith((".so", ".pyd"))

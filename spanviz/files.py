"""Small file helpers shared by the token cache, run records, checkpoints and the results store."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: str | os.PathLike[str], payload: bytes) -> Path:
    """Write ``payload`` to ``path`` via a temporary file in the same folder and ``os.replace``.

    Readers see the old file or the new one, never a partial one; on any error the temporary file is removed
    and the old file is left as it was. Creates the parent folder. Returns the path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(payload)
            temp.flush()
            os.fsync(temp.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return path

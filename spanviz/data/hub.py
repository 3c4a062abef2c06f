"""WikiText-2 from the Hugging Face hub (``datasets.load_dataset("Salesforce/wikitext", config)``), never waiting
long for a hub that does not answer.

The Hugging Face libraries read ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` once, when they are imported, and an
unreachable hub otherwise costs ~25 s of retries. So ``datasets`` is imported lazily (:func:`import_datasets`),
and before any hub download we probe the hub for at most :data:`HUB_PROBE_TIMEOUT_S` seconds; when it cannot be
reached (or offline use is asked for) we switch the Hugging Face libraries to offline mode, which loads a
previously downloaded copy from the Hugging Face cache or fails at once with :class:`HubUnavailableError`
explaining how to use a local folder. :func:`spanviz.data.wikitext.load_wikitext2` decides between a local folder
and the hub.
"""

from __future__ import annotations

import logging
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from spanviz.settings import ENV_DATA_DIR, ENV_OFFLINE, OFFLINE_SPLITS, command_name

logger = logging.getLogger(__name__)

HUB_ID = "Salesforce/wikitext"
"""The Hugging Face hub dataset that holds WikiText-2."""

HUB_PROBE_TIMEOUT_S = 3.0
"""Seconds we wait for the hub to answer before treating it as unreachable."""


class HubUnavailableError(ConnectionError):
    """The Hugging Face hub could not be used and no cached copy was found; the message says what to do.

    Attributes: ``reason`` (why the hub could not be used, one clause).
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


def _hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def _probe_hub(timeout: float = HUB_PROBE_TIMEOUT_S) -> str | None:
    """Ask the hub for any answer within ``timeout`` seconds. Returns None if it answered, else why not."""
    request = urllib.request.Request(_hub_endpoint(), method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # the server answered (with an error status): it is reachable
    except OSError as error:  # DNS failure, refused connection, timeout, TLS failure (URLError is an OSError)
        return f"{_hub_endpoint()}: {getattr(error, 'reason', error)}"


def _hub_help(reason: str) -> HubUnavailableError:
    return HubUnavailableError(
        f"Could not load WikiText-2 from the Hugging Face hub ({HUB_ID}): {reason}. "
        f"Use a local copy instead: pass data_dir=<folder> (command line: --data-dir <folder>) or set "
        f"{ENV_DATA_DIR}=<folder>, where the folder holds valid.txt/test.txt (and train.txt), "
        f"wiki.*.tokens, or the hub's *.parquet files; for a copy without the train split, train on "
        f"validation: splits={dict(OFFLINE_SPLITS)!r} (command line: --train-split validation --eval-split "
        f"test). Or, on a machine with internet, run `{command_name()} prepare-data` once; later runs with "
        f"{ENV_OFFLINE}=1 use the downloaded copy.",
        reason,
    )


def import_datasets(offline: bool) -> Any:
    """Import Hugging Face ``datasets`` (the module); with ``offline``, first switch the HF libraries to offline
    mode (sets ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE``).

    The libraries read the offline switch once, on import; if they were imported already, check
    :func:`_datasets_is_offline` afterwards. Raises ``ImportError`` when ``datasets`` is not installed.
    """
    if offline and "datasets" not in sys.modules and "huggingface_hub" not in sys.modules:
        logger.info("switching the Hugging Face libraries to offline mode (HF_HUB_OFFLINE=1)")
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["HF_DATASETS_OFFLINE"] = "1"
    import datasets

    return datasets


def _datasets_is_offline(datasets) -> bool:
    """Whether ``datasets`` (and ``huggingface_hub``) run in offline mode, i.e. fail fast without network."""
    import huggingface_hub.constants

    datasets_offline = getattr(datasets.config, "HF_HUB_OFFLINE", None)
    if datasets_offline is None:  # datasets < 2.19 called it HF_DATASETS_OFFLINE
        datasets_offline = getattr(datasets.config, "HF_DATASETS_OFFLINE", False)
    return bool(datasets_offline) and bool(huggingface_hub.constants.HF_HUB_OFFLINE)


def hub_texts(config: str, splits: Mapping[str, str], offline: bool) -> dict[str, list[str | None]]:
    """The ``text`` column of each role's split of WikiText-2 ``config`` from the hub (or, offline or when the hub
    does not answer within :data:`HUB_PROBE_TIMEOUT_S` seconds, from the Hugging Face cache): role → rows, each
    row a paragraph ending in ``"\\n"`` as the hub stores it. ``config`` and ``splits`` are checked by the caller
    (:func:`spanviz.data.wikitext.load_wikitext2`).

    Raises:
        HubUnavailableError: the hub cannot be used and the dataset is not in the Hugging Face cache.
    """
    unreachable = None
    if not offline:
        unreachable = _probe_hub()
        if unreachable is not None:
            logger.warning("the Hugging Face hub is unreachable (%s); trying the Hugging Face cache offline",
                           unreachable)
            offline = True
    datasets = import_datasets(offline)
    if offline and not _datasets_is_offline(datasets):
        # Calling load_dataset now would spend ~25 s retrying the network: fail at once instead.
        why = f"the hub is unreachable ({unreachable})" if unreachable else "offline mode was requested"
        raise _hub_help(
            f"{why}, and the Hugging Face cache cannot be tried because `datasets` was imported before "
            f"offline mode could be switched on (set {ENV_OFFLINE}=1 or HF_HUB_OFFLINE=1 before starting "
            "Python to use a copy downloaded earlier)"
        )
    try:
        dataset = datasets.load_dataset(HUB_ID, config)
    except OSError as error:  # ConnectionError (incl. offline mode), FileNotFoundError (not cached)
        if unreachable:
            why = f"the hub is unreachable ({unreachable}) and WikiText-2 is not in the Hugging Face cache"
        elif offline:
            why = "offline mode is on and WikiText-2 is not in the Hugging Face cache"
        else:
            why = "the download failed"
        raise _hub_help(f"{why} ({type(error).__name__}: {error})") from error
    return {role: list(dataset[split]["text"]) for role, split in splits.items()}

# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Fetch one model directory of the offline bundle onto a node, checked against the bundle's manifest.

The bundle (``playbooks/download.yml``) holds ``models/<name>/...`` and ``MANIFEST.sha256`` (sha256sum format,
paths relative to the bundle). The source is an HTTP(S) URL of the bundle root, or a directory on the node
(an NFS mount, a USB disk). Standard library only: this runs on the target node.

Everything but the choice of the model's rows lives in :mod:`bundle` (manifest, sources, sha256 cache, the
resumable parallel transfer with its progress file, ``FetchError``): import those names from there.
"""

from __future__ import annotations

import os
import time

from ansible_collections.ascendai.vllm.plugins.module_utils._bundle import (
    CHUNK_BYTES,
    MANIFEST_NAME,
    FetchError,
    fetch_files,
    load_entries,
    make_source,
)
from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle


def model_entries(entries, model, where=MANIFEST_NAME):
    """The manifest rows of ``models/<model>/``: a list of ``(path in the model, path in the bundle, sha256)``."""
    if not model or "/" in model.strip("/") or model in (".", ".."):
        raise FetchError(f"model={model!r} must be the name of one directory under the bundle's models/")
    prefix = "models/" + model.strip("/") + "/"
    rows = [(path[len(prefix):], path, digest) for path, digest in entries.items() if path.startswith(prefix)]
    if not rows:
        known = sorted({p.split("/")[1] for p in entries if p.startswith("models/") and p.count("/") >= 2})
        raise FetchError(f"{where} lists no files under {prefix}; models in this bundle: "
                         f"{', '.join(known) or 'none'}. Put the model in the bundle's models/ directory and "
                         "regenerate MANIFEST.sha256 (playbooks/download.yml, or tools/sandbox/model.sh)")
    return rows


def fetch_model(dest, model, src=None, manifest_text=None, parallel=4, retries=3, timeout=60, validate_certs=True,
                ca_path=None, rehash=False, status_file=None, check_mode=False, reserve_bytes=0,
                chunk_bytes=CHUNK_BYTES, progress_interval=1.0, backoff=1.0):
    """Bring ``dest`` to the manifest's ``models/<model>/`` files. Returns the module's result dict.

    ``src`` None verifies ``dest`` against the manifest only (the files were copied there by other means).
    """
    started = time.time()
    if parallel < 1:
        raise FetchError(f"parallel={parallel} must be at least 1")
    source = make_source(src, timeout=timeout, validate_certs=validate_certs, ca_path=ca_path) if src else None
    entries, where = load_entries(source, manifest_text)
    rows = model_entries(entries, model, where)
    result = fetch_files(dest, rows, source=source, label=model, parallel=parallel, retries=retries, rehash=rehash,
                         status_file=status_file, check_mode=check_mode, reserve_bytes=reserve_bytes,
                         chunk_bytes=chunk_bytes, progress_interval=progress_interval, backoff=backoff,
                         space_what="the model",
                         space_fix="Free space there, or put the models on a bigger filesystem (model_dir)",
                         manifest_label=f"models/{model}/")
    result.pop("sha256", None)
    result.update(model=model, src=_bundle.redact_url(src) if src else None, dest=os.path.abspath(dest))
    result["seconds"] = round(time.time() - started, 3)
    if "rate_bytes_per_s" in result:
        result["rate_bytes_per_s"] = round(result["bytes_fetched"] / max(result["seconds"], 1e-6), 1)
    return result

"""Compare vllm_options.KNOWN_OPTIONS (generated from the reference release's sdist) with the long options of the
vllm serve parser that the installed vLLM builds. Run under the service venv's Python, with the collection's
module_utils on PYTHONPATH. Prints JSON: {version, reference, missing, extra} (missing: known but not parsed;
extra: parsed but not known), or {version, reference, skipped} on another release.
"""

import json

from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo

version = vo.installed_vllm_version()
out = {"version": version, "reference": vo.REFERENCE_VLLM_VERSION}
if version != vo.REFERENCE_VLLM_VERSION:
    out["skipped"] = f"KNOWN_OPTIONS is from vLLM {vo.REFERENCE_VLLM_VERSION}, this is {version}"
else:
    names = set(vo.long_options(vo.vllm_serve_parser()[0])) - {"help", "config", "api_key", "model_tag", "subparser"}
    out["missing"] = sorted(set(vo.KNOWN_OPTIONS) - names)
    out["extra"] = sorted(names - set(vo.KNOWN_OPTIONS))
print(json.dumps(out))

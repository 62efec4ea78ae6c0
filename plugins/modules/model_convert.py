# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_convert
short_description: Convert a Hugging Face safetensors model to another float dtype, streaming
version_added: 0.1.0
description:
  - Converts every floating-point tensor (float64, float32, float16, bfloat16) of a Hugging Face model directory
    to O(dtype), tensor by tensor and chunk by chunk, so memory stays small whatever the size of the model.
  - Integer, boolean and float8 tensors are copied unchanged.
  - Rounding is round-to-nearest-even, bit for bit what C(torch.Tensor.to) gives for every value but NaN;
    a NaN stays a quiet NaN keeping its sign and leading payload bits.
  - The safetensors format is read and written directly; the node needs neither C(safetensors) nor torch,
    only numpy (and only when a tensor actually changes dtype).
  - Writes C(model.safetensors), or shards C(model-0000N-of-0000M.safetensors) plus
    C(model.safetensors.index.json), copies every other file (config, tokenizer, generation config, chat template,
    remote code) and sets C(torch_dtype) in C(config.json).
  - The result is verified (every tensor present once, same shape, asked dtype) in a temporary directory next to
    O(dest), which then replaces O(dest) in one rename; an interrupted run leaves O(dest) as it was.
  - A marker file in O(dest) records the source fingerprint (sizes, mtimes, header digests) and the options;
    when they match, nothing is done.
  - Pickle weights (C(.bin), C(.pt), C(.pth), C(.ckpt)) are refused unless O(allow_pickle=true), because
    loading a pickle runs code from the file, and vLLM loads safetensors anyway.
  - Quantized models (C(quantization_config) in C(config.json), msModelSlim's C(quant_model_description.json))
    are refused; their dtype cannot change without breaking their scales.
  - Nothing outside O(src) is read or copied. A symlink that resolves out of O(src) (C(tokenizer.json -> /etc/passwd))
    and an index entry naming a file outside it (C(../x), an absolute path) are refused; links of a Hugging Face
    cache snapshot into its repository's C(blobs) directory are followed.
  - Headers are checked as the safetensors library checks them (tensors tiling the data without gap or overlap,
    no duplicate names, known dtypes, non-negative integer shapes whose size matches the offsets); a damaged file
    is named with the reason.
options:
  src:
    description: Directory of the source model (C(config.json) and C(*.safetensors), with or without an index).
    type: path
    required: true
  dest:
    description:
      - Directory to create or replace with the converted model. Must lie outside O(src), also through
        symlinks, and must not itself be a symlink (the whole directory is replaced; give the real one).
      - Temporary directories next to it (C(.<name>.convert-*)) are removed only when a run of this module made
        them.
      - Its parent must have room for the converted model; this is checked before writing.
    type: path
    required: true
  dtype:
    description: Floating-point dtype of the result.
    type: str
    required: true
    choices: [float32, float16, bfloat16]
  max_shard_size:
    description:
      - Largest shard, as Hugging Face counts it (tensor bytes). C(GB), C(MB), C(KB) are powers of 10,
        C(GiB), C(MiB), C(KiB) powers of 2, a bare number is bytes.
      - A tensor bigger than this gets a shard of its own.
    type: str
    default: 5GB
  allow_pickle:
    description:
      - Convert pickle weights when O(src) holds no safetensors. Needs torch on the node; files are loaded with
        C(torch.load(weights_only=True)), which still trusts the file's tensor data, so use it only on files from
        a source you trust.
      - Ignored when O(src) has safetensors weights; pickles beside them are neither read nor copied.
    type: bool
    default: false
  force:
    description: Convert again even when O(dest) already holds this conversion.
    type: bool
    default: false
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reads the source headers and reports what would be written, without writing.
  diff_mode:
    support: partial
    details: Reports the dtype and shard files of O(dest) before and after.
  idempotent:
    support: full
    details: A finished conversion of the same source with the same options is recognised and skipped.
notes:
  - Peak memory is a few chunk buffers (about 30 MiB), independent of the model size.
  - Temporary directories C(.<dest name>.convert-<pid>-*) next to O(dest) left by a killed run are removed by the
    next run.
requirements:
  - numpy on the node, when a tensor changes dtype.
  - torch on the node, only with O(allow_pickle=true).
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Convert DeepSeek-LLM 67B to bfloat16 for vLLM
  ascendai.vllm.model_convert:
    src: /data/models/deepseek-llm-67b-chat
    dest: /data/models/deepseek-llm-67b-chat-bf16
    dtype: bfloat16

- name: Convert to float16 in 2 GiB shards
  ascendai.vllm.model_convert:
    src: /data/models/tiny-llama
    dest: /data/models/tiny-llama-fp16
    dtype: float16
    max_shard_size: 2GiB
"""

RETURN = r"""
dest:
  description: Absolute path of the converted model.
  returned: always
  type: str
  sample: /data/models/deepseek-llm-67b-chat-bf16
dtype:
  description: The dtype asked for.
  returned: always
  type: str
  sample: bfloat16
shards:
  description: Weight files of the result.
  returned: always
  type: list
  elements: str
  sample: [model-00001-of-00002.safetensors, model-00002-of-00002.safetensors]
tensors:
  description: Number of tensors.
  returned: always
  type: int
  sample: 563
converted_tensors:
  description: Number of tensors whose dtype changes (the others are copied unchanged).
  returned: always
  type: int
  sample: 561
source_dtypes:
  description: Tensor count per safetensors dtype in the source.
  returned: always
  type: dict
  sample: {"F32": 561, "I64": 2}
dest_dtypes:
  description: Tensor count per safetensors dtype in the result.
  returned: always
  type: dict
  sample: {"BF16": 561, "I64": 2}
total_size:
  description: Bytes of tensor data in the result (the index's C(metadata.total_size)).
  returned: always
  type: int
  sample: 134447001600
copied_files:
  description: Files copied from O(src) (relative paths); C(config.json) gets the new C(torch_dtype).
  returned: always
  type: list
  elements: str
  sample: [config.json, generation_config.json, tokenizer.json, tokenizer_config.json]
skipped_files:
  description: Files of O(src) left out (pickles beside safetensors, other weight formats, hidden files).
  returned: always
  type: list
  elements: str
  sample: [pytorch_model.bin]
source_format:
  description: C(safetensors), or C(pickle) with O(allow_pickle=true).
  returned: always
  type: str
  sample: safetensors
seconds:
  description: Wall-clock seconds of the conversion.
  returned: changed and not check mode
  type: float
  sample: 412.7
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._safetensors_convert import (
    ConvertError,
    convert_model,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "dtype": {"type": "str", "required": True, "choices": ["float32", "float16", "bfloat16"]},
            "max_shard_size": {"type": "str", "default": "5GB"},
            "allow_pickle": {"type": "bool", "default": False},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        result = convert_model(p["src"], p["dest"], p["dtype"], max_shard_size=p["max_shard_size"],
                               allow_pickle=p["allow_pickle"], force=p["force"], check_mode=module.check_mode)
    except ConvertError as exc:
        module.fail_json(msg=str(exc), src=p["src"], dest=p["dest"])
    except OSError as exc:
        module.fail_json(msg="model_convert {} -> {} failed: {}".format(p["src"], p["dest"], exc))
    if not module._diff:
        result.pop("diff", None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()

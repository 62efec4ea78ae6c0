# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The ``attributes:`` documentation every module of the collection shares (what check and diff mode mean).

A module names the fragment and sets only ``support`` (and ``details`` where it has something to add)::

    extends_documentation_fragment:
      - ascendai.vllm.attributes
    attributes:
      check_mode:
        support: full
        details: Reports the commands that would run without running them.
"""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragments: DOCUMENTATION (check and diff mode), INFO_MODULE (read-only), FACTS, IDEMPOTENT."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module changes nothing, so it runs the same in check mode.
  diff_mode:
    support: none
"""

    FACTS = r"""
options: {}
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""

    IDEMPOTENT = r"""
options: {}
attributes:
  idempotent:
    description: When run twice in a row outside check mode with the same arguments, the second run indicates no
      change.
"""

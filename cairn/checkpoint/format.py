"""Names and numbers of the checkpoint format (see docs/checkpoint-format.md)."""

from __future__ import annotations

__all__ = [
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_FILE",
    "ALGORITHM_STATE_FILE",
    "ALGORITHM_ARRAYS_FILE",
    "POLICY_STATE_FILE",
    "POLICY_ARRAYS_FILE",
    "POLICIES_DIR",
    "HASH_ALGORITHM",
    "MAX_JSON_BYTES",
    "MAX_MANIFEST_BYTES",
]

FORMAT_NAME = "cairn-checkpoint"
#: The version this cairn writes. Every version ever written keeps loading (migrations.py).
FORMAT_VERSION = "4"
MANIFEST_FILE = "cairn_checkpoint.json"
ALGORITHM_STATE_FILE = "algorithm_state.json"
ALGORITHM_ARRAYS_FILE = "algorithm_state.safetensors"
POLICY_STATE_FILE = "policy_state.json"
POLICY_ARRAYS_FILE = "policy_state.safetensors"
POLICIES_DIR = "policies"
COMPONENTS_DIR = "components"
COMPONENT_STATE_FILE = "state.json"
COMPONENT_ARRAYS_FILE = "state.safetensors"
#: Content hash of every file: XXH3-128, hex. An integrity check against corruption (truncation,
#: bit flips, mixed-up files), not a signature: anyone who can edit files can edit the manifest.
HASH_ALGORITHM = "xxh3_128"
#: Limits that keep a hostile checkpoint from exhausting memory before it is rejected.
MAX_MANIFEST_BYTES = 16 << 20
MAX_JSON_BYTES = 256 << 20

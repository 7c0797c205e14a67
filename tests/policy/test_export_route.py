"""One route to native-model writing: cairn.registry names cairn.export's writers, resolved at
the call; importing cairn.export registers nothing."""

from __future__ import annotations

import cairn.export
import cairn.export.checkpoint_files
from cairn import registry


def test_the_registry_names_cairn_exports_writers() -> None:
    assert registry.native_model_writer() is cairn.export.write_native_model_files
    assert registry.model_exporter() is cairn.export.export_model
    assert registry.native_model_reuses() is cairn.export.checkpoint_files.native_files_hold


def test_nothing_is_installed_at_import_time() -> None:
    for name in ("register_native_model_writer", "register_model_exporter", "_HOOKS"):
        assert not hasattr(registry, name)

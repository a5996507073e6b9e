"""Run records: typed versioned manifest, append-only resumable writer (shardable), verified readers."""
from .files import atomic_write_text
from .integrity import RecordBusyError, RecordError
from .provenance import git_state, provenance
from .reader import READ_LOG_ENV, Run, load_run, record_paths, runs_df, trials_df
from .schema import MANIFEST_FIELDS, SCHEMA_VERSION, Manifest, PartInfo, canonical_json, spec_hash
from .shards import Shard, shard_progress
from .writer import RunWriter, read_manifest, record_dir, writer_defaults

__all__ = [
    "RunWriter", "RecordError", "RecordBusyError", "Run", "load_run", "runs_df", "trials_df", "provenance",
    "git_state", "spec_hash", "canonical_json", "record_dir", "MANIFEST_FIELDS",
    "SCHEMA_VERSION", "READ_LOG_ENV", "atomic_write_text", "Manifest", "PartInfo", "Shard",
    "shard_progress", "writer_defaults", "read_manifest", "record_paths",
]

"""Run records: schema, append-only resumable writer, readers, provenance."""
from .provenance import git_state, provenance
from .reader import READ_LOG_ENV, Run, load_run, runs_df, trials_df
from .schema import MANIFEST_FIELDS, SCHEMA_VERSION, canonical_json, spec_hash
from .writer import RecordError, RunWriter, atomic_write_text, record_dir

__all__ = [
    "RunWriter", "RecordError", "Run", "load_run", "runs_df", "trials_df", "provenance",
    "git_state", "spec_hash", "canonical_json", "record_dir", "MANIFEST_FIELDS",
    "SCHEMA_VERSION", "READ_LOG_ENV", "atomic_write_text",
]

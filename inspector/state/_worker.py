"""Imported by the load check's fork server (inspector.state.guard): everything a check runs,
loaded once, so that each check's process starts with it (a fork, milliseconds)."""
import engine
from inspector.state import loading  # noqa: F401

engine.layer_type_list()

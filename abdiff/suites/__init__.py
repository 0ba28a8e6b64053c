"""Config suites: built-in YAML files beside this module, or a path to one."""

from abdiff.suites.loader import Config, Suite, builtin_suites, load_suite

__all__ = ["Config", "Suite", "builtin_suites", "load_suite"]

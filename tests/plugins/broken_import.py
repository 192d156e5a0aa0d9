"""A plugin that fails to import (a missing dependency)."""

import gateway_plugin_dependency_that_is_not_installed  # noqa: F401

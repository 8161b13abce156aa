"""weir: a Gateway API implementation built around XBackend, with Envoy as its data plane."""

__version__ = "0.1.0"

#: The controller name weir answers to unless ``--controller-name`` says otherwise.
DEFAULT_CONTROLLER_NAME = "weir.dev/gateway-controller"

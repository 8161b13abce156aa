"""The Kubernetes provider: objects listed and watched from an API server, statuses written back,
leader election over a Lease, Events, and the headless Services behind EndpointSelector XBackends."""

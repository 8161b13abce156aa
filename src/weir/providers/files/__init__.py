"""The files provider: Gateway API objects read from a folder of YAML, watched for changes."""

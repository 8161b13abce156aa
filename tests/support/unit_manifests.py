"""Manifests several unit tests start from."""

#: weir's GatewayClass and a Gateway ``default/gw`` with one HTTP listener on port 8080.
GATEWAY = """\
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weir}
spec: {controllerName: weir.dev/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: default}
spec:
  gatewayClassName: weir
  listeners: [{name: http, port: 8080, protocol: HTTP}]
"""

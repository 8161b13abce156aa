"""The intermediate representation: what the data plane must do, in weir's words.

The IR is the contract between :mod:`weir.translate` (which produces it from
Gateway API resources) and :mod:`weir.xds.build` (which turns it into Envoy
resources). It is made of frozen dataclasses holding only plain values and
tuples, so two IRs built from the same input compare equal and serialise to
the same bytes.

Names in the IR (listener, upstream, secret names) are stable identifiers
derived from the Gateway API objects; :mod:`weir.xds.build` uses them verbatim
as Envoy resource names, so a reader can follow an object from a manifest to
``/config_dump``.

The types live by subject in :mod:`weir.ir.routing` (listeners, virtual
hosts, routes), :mod:`weir.ir.upstreams` and :mod:`weir.ir.secrets`; this
module holds the whole (:class:`IR`) and :func:`to_data`, and re-exports
every type, so ``ir.Upstream`` reads the same everywhere.

Nothing here knows Envoy field names. A concept appears here when a user can
observe it; how Envoy achieves it is :mod:`weir.xds.build`'s business.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from weir.ir.routing import (
    DEFAULT_IDLE_TIMEOUT_MS as DEFAULT_IDLE_TIMEOUT_MS,
)
from weir.ir.routing import (
    DEFAULT_REQUEST_TIMEOUT_MS as DEFAULT_REQUEST_TIMEOUT_MS,
)
from weir.ir.routing import (
    DEFAULT_TCP_IDLE_TIMEOUT_MS as DEFAULT_TCP_IDLE_TIMEOUT_MS,
)
from weir.ir.routing import (
    DEFAULT_UDP_IDLE_TIMEOUT_MS as DEFAULT_UDP_IDLE_TIMEOUT_MS,
)
from weir.ir.routing import (
    AnyListener as AnyListener,
)
from weir.ir.routing import (
    ClientValidation as ClientValidation,
)
from weir.ir.routing import (
    Cors as Cors,
)
from weir.ir.routing import (
    DirectResponse as DirectResponse,
)
from weir.ir.routing import (
    Forward as Forward,
)
from weir.ir.routing import (
    Header as Header,
)
from weir.ir.routing import (
    HeaderEdits as HeaderEdits,
)
from weir.ir.routing import (
    HeaderMatch as HeaderMatch,
)
from weir.ir.routing import (
    HttpsServer as HttpsServer,
)
from weir.ir.routing import (
    Listener as Listener,
)
from weir.ir.routing import (
    Mirror as Mirror,
)
from weir.ir.routing import (
    PathMatch as PathMatch,
)
from weir.ir.routing import (
    PathRewrite as PathRewrite,
)
from weir.ir.routing import (
    QueryMatch as QueryMatch,
)
from weir.ir.routing import (
    Redirect as Redirect,
)
from weir.ir.routing import (
    Retry as Retry,
)
from weir.ir.routing import (
    Rewrite as Rewrite,
)
from weir.ir.routing import (
    Route as Route,
)
from weir.ir.routing import (
    RouteAction as RouteAction,
)
from weir.ir.routing import (
    RouteMatch as RouteMatch,
)
from weir.ir.routing import (
    SessionAffinity as SessionAffinity,
)
from weir.ir.routing import (
    TcpListener as TcpListener,
)
from weir.ir.routing import (
    TlsListener as TlsListener,
)
from weir.ir.routing import (
    TlsRelay as TlsRelay,
)
from weir.ir.routing import (
    UdpListener as UdpListener,
)
from weir.ir.routing import (
    VirtualHost as VirtualHost,
)
from weir.ir.routing import (
    WeightedBackend as WeightedBackend,
)
from weir.ir.secrets import (
    GenericSecret as GenericSecret,
)
from weir.ir.secrets import (
    Secret as Secret,
)
from weir.ir.secrets import (
    TlsCertificate as TlsCertificate,
)
from weir.ir.secrets import (
    TrustedCA as TrustedCA,
)
from weir.ir.upstreams import (
    AwsSigV4 as AwsSigV4,
)
from weir.ir.upstreams import (
    CredentialInjection as CredentialInjection,
)
from weir.ir.upstreams import (
    DnsName as DnsName,
)
from weir.ir.upstreams import (
    DnsSettings as DnsSettings,
)
from weir.ir.upstreams import (
    EgressGuard as EgressGuard,
)
from weir.ir.upstreams import (
    Endpoint as Endpoint,
)
from weir.ir.upstreams import (
    McpCaller as McpCaller,
)
from weir.ir.upstreams import (
    McpJwtProvider as McpJwtProvider,
)
from weir.ir.upstreams import (
    McpToolGrant as McpToolGrant,
)
from weir.ir.upstreams import (
    McpToolPolicy as McpToolPolicy,
)
from weir.ir.upstreams import (
    OAuth2Credential as OAuth2Credential,
)
from weir.ir.upstreams import (
    RetryBudget as RetryBudget,
)
from weir.ir.upstreams import (
    StaticEndpoints as StaticEndpoints,
)
from weir.ir.upstreams import (
    SubjectAltName as SubjectAltName,
)
from weir.ir.upstreams import (
    Upstream as Upstream,
)
from weir.ir.upstreams import (
    UpstreamProtocol as UpstreamProtocol,
)
from weir.ir.upstreams import (
    UpstreamTLS as UpstreamTLS,
)


@dataclass(frozen=True, slots=True)
class IR:
    """Everything the data plane must do. Tuples are sorted by name.

    ``listeners`` holds HTTP, TCP and TLS listeners alike (each binds a
    socket); their names, ``address:port``, are unique across the kinds.
    """

    listeners: tuple[AnyListener, ...] = ()
    upstreams: tuple[Upstream, ...] = ()
    secrets: tuple[Secret, ...] = ()
    dns: DnsSettings = DnsSettings()  # noqa: RUF009 (frozen: one shared default is safe)


def to_data(value: Any, *, omit_defaults: bool = False) -> Any:
    """Plain data (dicts, lists, scalars) for an IR value, for golden files and ``weir translate``.

    Dataclasses become mappings with a ``type`` key naming their class where
    the field's type is a union, enums become their value, tuples lists.
    Secret material (private keys, secret values, AWS secret keys and session
    tokens) is replaced by a placeholder so that it never reaches output
    meant for people, with or without ``omit_defaults``. ``omit_defaults``: leave out every
    field equal to its default (translate goldens: a new IR field, at its
    default, then changes none of them, and a diff shows what changed).
    """
    if isinstance(value, TlsCertificate):
        return {
            "type": "TlsCertificate",
            "name": value.name,
            "certificateChain": f"<{len(value.certificate_chain)} bytes of PEM>",
            "privateKey": "<redacted>",
        }
    if isinstance(value, GenericSecret):
        return {"type": "GenericSecret", "name": value.name, "value": "<redacted>"}
    if isinstance(value, AwsSigV4):
        data = {
            camel(f.name): to_data(getattr(value, f.name), omit_defaults=omit_defaults)
            for f in dataclasses.fields(value)
            if not (omit_defaults and _is_default(f, getattr(value, f.name)))
        }
        data["secretAccessKey"] = "<redacted>"
        if value.session_token is not None:
            data["sessionToken"] = "<redacted>"
        return data
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        if isinstance(
            value,
            (
                Forward,
                DirectResponse,
                Redirect,
                StaticEndpoints,
                DnsName,
                TrustedCA,
                Listener,
                TcpListener,
                UdpListener,
                TlsListener,
            ),
        ):
            out["type"] = type(value).__name__
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if omit_defaults and _is_default(field, item):
                continue
            out[camel(field.name)] = to_data(item, omit_defaults=omit_defaults)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [to_data(v, omit_defaults=omit_defaults) for v in value]
    return value


def _is_default(field: dataclasses.Field[Any], value: Any) -> bool:
    """Whether ``value`` is ``field``'s default (a field without one never is)."""
    if field.default is not dataclasses.MISSING:
        return bool(value == field.default)
    if field.default_factory is not dataclasses.MISSING:
        return bool(value == field.default_factory())
    return False


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)

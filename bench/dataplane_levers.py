"""``weir run`` with experimental changes to its generated Envoy config: the lever study.

    python bench/dataplane_levers.py LEVER[,LEVER...] run -f ... (weir run's arguments)

runs the real ``weir run`` (translation, ADS, Envoy) with the controller's build
(:meth:`weir.xds.cache.BuildCache.build`) wrapped so that each named lever edits the
resources before they are served.
``dataplane.py`` starts it for contenders named ``weir+LEVER,...``, so a
lever is measured against unchanged weir in the same rounds. Levers name what
they remove or change; they are experiments, not weir options, and some of
them remove protections weir must keep (they measure what those cost).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from envoy.config.bootstrap.v3 import bootstrap_pb2  # noqa: F401 - registers bootstrap types
from envoy.extensions.filters.http.router.v3 import router_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2 as hcm_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from google.protobuf.message import Message

from weir.xds import build, listeners
from weir.xds.cache import BuildCache
from weir.xds.snapshot import CLUSTER, LISTENER, ROUTE, Resource

Resources = dict[str, dict[str, Message]]
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


def _each_hcm(resources: Resources, edit: Callable[[Any], None]) -> None:
    for listener in resources[LISTENER].values():
        for chain in listener.filter_chains:
            for network_filter in chain.filters:
                if network_filter.name != "envoy.filters.network.http_connection_manager":
                    continue
                hcm = hcm_pb2.HttpConnectionManager()
                network_filter.typed_config.Unpack(hcm)
                edit(hcm)
                network_filter.typed_config.Pack(hcm, deterministic=True)


def _each_http_options(resources: Resources, edit: Callable[[Any], None]) -> None:
    for cluster in resources[CLUSTER].values():
        options_any = cluster.typed_extension_protocol_options.get(_HTTP_OPTIONS)
        if options_any is None:
            continue
        options = http_protocol_options_pb2.HttpProtocolOptions()
        options_any.Unpack(options)
        edit(options)
        options_any.Pack(options, deterministic=True)


def _router(edit: Callable[[Any], None]) -> Callable[[Any], None]:
    def on_hcm(hcm: Any) -> None:
        for http_filter in hcm.http_filters:
            if http_filter.name == "envoy.filters.http.router":
                router = router_pb2.Router()
                http_filter.typed_config.Unpack(router)
                edit(router)
                http_filter.typed_config.Pack(router, deterministic=True)

    return on_hcm


def _drop_upstream_filter(name: str) -> Callable[[Any], None]:
    def edit(options: Any) -> None:
        kept = [f for f in options.http_filters if f.name != name]
        if all(f.name == "envoy.filters.http.upstream_codec" for f in kept):
            kept = []
        del options.http_filters[:]
        options.http_filters.extend(kept)

    return edit


def _http1(options: Any) -> None:
    if options.HasField("auto_config"):
        options.ClearField("auto_config")
        options.explicit_http_config.http_protocol_options.SetInParent()


def _http2(options: Any) -> None:
    if options.HasField("auto_config"):
        options.ClearField("auto_config")
        options.explicit_http_config.http2_protocol_options.SetInParent()


def _no_normalize(hcm: Any) -> None:
    hcm.ClearField("normalize_path")
    hcm.merge_slashes = False
    hcm.ClearField("path_with_escaped_slashes_action")


def _no_route_header_removal(resources: Resources) -> None:
    for config in resources[ROUTE].values():
        for vhost in config.virtual_hosts:
            for route in vhost.routes:
                del route.request_headers_to_remove[:]


def _drop_http_filter(name: str) -> Callable[[Any], None]:
    def edit(hcm: Any) -> None:
        kept = [f for f in hcm.http_filters if f.name != name]
        del hcm.http_filters[:]
        hcm.http_filters.extend(kept)

    return edit


def _access_log_fields(keep: Callable[[str], bool]) -> Callable[[Any], None]:
    def edit(hcm: Any) -> None:
        fields = {k: v for k, v in build.ACCESS_LOG_FORMAT.items() if keep(k)}
        del hcm.access_log[:]
        hcm.access_log.append(listeners._access_log(fields))

    return edit


def _text_access_log(hcm: Any) -> None:
    from envoy.config.core.v3 import substitution_format_string_pb2 as format_pb2
    from envoy.extensions.access_loggers.stream.v3 import stream_pb2

    line = " ".join(f"{k}={v}" for k, v in build.ACCESS_LOG_FORMAT.items()) + "\n"
    stdout = stream_pb2.StdoutAccessLog(
        log_format=format_pb2.SubstitutionFormatString(text_format_source={"inline_string": line})
    )
    hcm.access_log[0].typed_config.Pack(stdout, deterministic=True)


#: The default denied networks before weir.addresses (11 networks, IPv4-mapped forms only):
#: what the longer list (29 networks and every embedded form) costs per request.
LEVERS: dict[str, Callable[[Resources], None]] = {
    # A control: weir unchanged, to see how far apart two identical configs measure.
    "same": lambda r: None,
    "text-access-log": lambda r: _each_hcm(r, _text_access_log),
    "access-log-no-time": lambda r: _each_hcm(r, _access_log_fields(lambda k: k != "start_time")),
    "access-log-5-fields": lambda r: _each_hcm(
        r,
        _access_log_fields(
            lambda k: k in {"response_code", "response_flags", "duration_ms", "upstream_host", "path"}
        ),
    ),
    "no-cors": lambda r: _each_hcm(r, _drop_http_filter("envoy.filters.http.cors")),
    "no-access-log": lambda r: _each_hcm(r, lambda h: h.ClearField("access_log")),
    "no-dynamic-stats": lambda r: _each_hcm(
        r, _router(lambda rt: rt.dynamic_stats.__setattr__("value", False))
    ),
    "no-local-reply": lambda r: _each_hcm(r, lambda h: h.ClearField("local_reply_config")),
    "no-remote-address": lambda r: _each_hcm(r, lambda h: h.ClearField("use_remote_address")),
    "no-normalize": lambda r: _each_hcm(r, _no_normalize),
    "no-strip": lambda r: _each_http_options(r, _drop_upstream_filter("weir.strip_internal_headers")),
    "no-upstream-filters": lambda r: _each_http_options(r, lambda o: o.ClearField("http_filters")),
    "no-route-header-removal": _no_route_header_removal,
    "http1": lambda r: _each_http_options(r, _http1),
    "http2": lambda r: _each_http_options(r, _http2),
    # weir's generated config before the data-path work turned them off.
    "dynamic-stats": lambda r: _each_hcm(r, _router(lambda rt: rt.ClearField("dynamic_stats"))),
}

#: Levers that change weir's command line rather than its Envoy config.
ARGUMENT_LEVERS = {
    # weir's logs at WARNING: access-log lines passed through weir's log are dropped there.
    "quiet": ["--log-level", "warning"],
    # Access-log lines through weir's Python log (``weir.envoy.access``), as before --access-log.
    "forward-access-log": ["--access-log", "log"],
}
#: Levers that change the bootstrap.
BOOTSTRAP_LEVERS = {"no-stats": {"stats_config": {"stats_matcher": {"reject_all": True}}}}


def main() -> None:
    levers = [name for name in sys.argv[1].split(",") if name]
    unknown = set(levers) - set(LEVERS) - set(ARGUMENT_LEVERS) - set(BOOTSTRAP_LEVERS)
    if unknown:
        raise SystemExit(
            f"unknown lever(s): {', '.join(sorted(unknown))}; known: "
            f"{', '.join(sorted([*LEVERS, *ARGUMENT_LEVERS, *BOOTSTRAP_LEVERS]))}"
        )
    original = BuildCache.build

    def patched(self: BuildCache, ir_: Any) -> dict[str, dict[str, Resource]]:
        built = original(self, ir_)
        resources: Resources = {
            t: {n: r.message() for n, r in by_name.items()} for t, by_name in built.items()
        }
        for name in levers:
            if name in LEVERS:
                LEVERS[name](resources)
        return {t: {n: Resource.of(m, n) for n, m in by_name.items()} for t, by_name in resources.items()}

    BuildCache.build = patched  # type: ignore[method-assign]
    extra_bootstrap = [BOOTSTRAP_LEVERS[n] for n in levers if n in BOOTSTRAP_LEVERS]
    if extra_bootstrap:
        import weir.bootstrap
        import weir.controller

        original_bootstrap = weir.bootstrap.bootstrap

        def bootstrap(**kwargs: Any) -> dict[str, Any]:
            config = original_bootstrap(**kwargs)
            for extra in extra_bootstrap:
                config.update(extra)
            return config

        setattr(weir.controller, "bootstrap", bootstrap)  # noqa: B010 - not exported, patched all the same
    args = sys.argv[2:]
    for name in levers:
        args += ARGUMENT_LEVERS.get(name, [])
    sys.argv = ["weir", *args]
    from weir.cli import main as weir_main

    weir_main()


if __name__ == "__main__":
    main()

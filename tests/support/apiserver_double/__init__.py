"""A Kubernetes API-server test double, served over real HTTP on a loopback address.

weir's Kubernetes provider is tested against a real kube-apiserver in
tests/kube, and against :class:`ApiServerDouble` for what a real one cannot be
made to do quickly (compaction and 410 on demand, injected faults, loopback
endpoints; tests/kube/README.md says which test uses which): real HTTP/1.1
(``h11``) from a background thread, driven by the real ``lightkube`` client,
with the semantics that client and a controller rely on implemented as the
API server implements them.

Implemented (as the API server does it):

- **Paths**: ``/api/v1/...`` and ``/apis/GROUP/VERSION/...``; namespaced
  (``namespaces/NS/PLURAL[/NAME[/status]]``), cluster-scoped, and
  all-namespaces list/watch; discovery (``/api``, ``/apis``, ``/apis/G``,
  ``/apis/G/V``, ``/api/v1``), ``/version``, ``/healthz``. A resource that is
  not served (e.g. a CRD not installed) answers 404 with a Status
  "the server could not find the requested resource"; :meth:`~ApiServerDouble.install_crd`
  and :meth:`~ApiServerDouble.uninstall_crd` change that at run time
  (removing a CRD deletes its objects, with DELETED events, and ends its watches).
- **Verbs**: list, watch, get, create (POST), replace (PUT), patch, delete,
  deletecollection; ``/status`` get/put/patch for kinds with a status
  subresource; ``dryRun=All``; ``fieldManager`` (default: the User-Agent up to
  its first ``/``); ``generateName``.
- **Metadata**: one global, monotonically increasing ``resourceVersion``
  (a decimal string) across all kinds, bumped by every create, update,
  status update and delete; ``uid``, ``creationTimestamp``, ``generation``
  and ``managedFields`` are server-set (what a request says about them is
  ignored). ``generation`` is 1 on create and grows when anything outside
  ``metadata`` changes — and outside ``status`` too, for kinds with a status
  subresource. A write that changes nothing gets no new resourceVersion and
  no event.
- **Status subresource**: ``PUT``/``PATCH .../NAME/status`` change only
  ``status``; the main endpoint ignores ``status`` (and drops it on create).
- **Optimistic concurrency**: a ``metadata.resourceVersion`` in a PUT body or
  set by a patch must be the stored one, else 409 Conflict ("the object has
  been modified; please apply your changes to the latest version and try
  again"). A PUT without one is unconditional for built-in kinds (Lease,
  Service, ...) and 422 Invalid for CRDs, as ``AllowUnconditionalUpdate``
  decides in Kubernetes. Create of an existing name: 409 AlreadyExists; DELETE
  preconditions (``uid``, ``resourceVersion``): 409 Conflict.
- **Patch types** (:mod:`~apiserver_double.patches`): merge, JSON patch,
  strategic merge (built-in kinds only; CRDs answer 415 UnsupportedMediaType
  as in Kubernetes) and server-side apply (an apply to a missing object
  creates it).
- **List**: ``{kind: KindList, apiVersion, metadata: {resourceVersion}, items}``,
  items sorted by namespace and name; items of a built-in kind carry no
  ``apiVersion``/``kind`` (as from a real server), those of CRDs do;
  ``labelSelector`` (``=``, ``==``, ``!=``, ``in``, ``notin``, exists, ``!``),
  ``fieldSelector`` (``metadata.name``, ``metadata.namespace``; other fields
  400 "field label not supported"); ``limit``/``continue`` pages through one
  snapshot, with ``remainingItemCount``.
- **Watch** (``watch=true|1``): a chunked response of JSON lines
  ``{"type": ..., "object": ...}``. ``resourceVersion`` absent or "0": an
  ADDED per current object, then live events. Otherwise every change after
  it, replayed from history (no event is ever lost between a list and a
  watch, or across a reconnect), then live ones — unless history no longer
  reaches back that far (``history_limit`` events are kept;
  :meth:`~ApiServerDouble.compact` forgets them all): then an ERROR event
  with a 410 ``Expired`` Status ("too old resource version"), and the end of
  the stream (lightkube raises ``ApiError`` with ``status.code == 410``).
  An update that moves an object into (out of) a watch's label or field
  selection is an ADDED (DELETED) for that watch. ``allowWatchBookmarks=true``
  adds a BOOKMARK (``apiVersion``, ``kind``, ``metadata.resourceVersion``
  only) every ``bookmark_interval_s``, never ahead of an event not yet sent.
  ``timeoutSeconds`` ends the stream cleanly. ``compact()`` sends open
  watches an ERROR 410 and ends them.
- **Errors** are ``Status`` objects (``kind: Status``, ``status: Failure``,
  ``message``, ``reason``, ``details``, ``code``) with ``Content-Type:
  application/json`` (which lightkube needs to raise ``ApiError``): 400
  BadRequest, 401 Unauthorized, 404 NotFound, 405 MethodNotAllowed, 409
  Conflict/AlreadyExists, 410 Expired, 415, 422 Invalid, and any code
  :meth:`~ApiServerDouble.fail_next` injects.
- **Authentication**: once a bearer token is known
  (:meth:`~ApiServerDouble.write_kubeconfig` with ``token=``, or
  :meth:`~ApiServerDouble.authorize`), a request without one of the known
  tokens gets 401.
- **Restart**: :meth:`~ApiServerDouble.stop` aborts every connection (open
  watches are cut mid-stream) and joins the thread; :meth:`~ApiServerDouble.start`
  serves the same objects, resourceVersion counter and history on the same port.

Not implemented (simplifications a reader should know):

- No authorization (RBAC), admission webhooks, OpenAPI validation, defaulting
  or pruning: objects are stored as sent. The NamespaceLifecycle check (no
  objects in a namespace that does not exist) is off unless
  ``enforce_namespaces=True``; deleting a Namespace does not delete its objects.
- No finalizers, graceful deletion or garbage collection: DELETE removes at once.
- Versions of one resource share storage without conversion.
- ``generation`` is kept for every kind (real built-ins such as ConfigMap have none).
- Strategic merge patch merges like a merge patch (lists are replaced, not
  merged by key). Server-side apply merges the sent fields: no field
  ownership, so no apply conflicts and no removal of fields a manager stops
  sending. ``managedFields`` is simplified: one entry per manager, operation
  and subresource, whose ``fieldsV1`` covers what its last write sent.
- ``resourceVersion``/``resourceVersionMatch`` on a list are ignored (lists
  are always current); a watch without ``timeoutSeconds`` stays open until
  the client or :meth:`~ApiServerDouble.stop` ends it.
- HTTP/1.1 only, plain HTTP, JSON only (no protobuf, no HTTP/2, no TLS).
"""

from apiserver_double.double import DIRECT_MANAGER, ApiServerDouble
from apiserver_double.errors import ApiStatusError
from apiserver_double.kinds import DEFAULT_KINDS, LEASE, XBACKEND, KindInfo, guess_plural, kinds_without

__all__ = [
    "DEFAULT_KINDS",
    "DIRECT_MANAGER",
    "LEASE",
    "XBACKEND",
    "ApiServerDouble",
    "ApiStatusError",
    "KindInfo",
    "guess_plural",
    "kinds_without",
]

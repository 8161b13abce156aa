"""ReferenceGrant: may an object in one namespace refer to an object in another?"""

from __future__ import annotations

from weir.resources import Resources


def reference_permitted(
    resources: Resources,
    *,
    from_group: str,
    from_kind: str,
    from_namespace: str,
    to_group: str,
    to_kind: str,
    to_namespace: str,
    to_name: str,
) -> bool:
    """Whether the reference stays in its namespace or a ReferenceGrant in the target namespace allows it."""
    if from_namespace == to_namespace:
        return True
    for grant in resources.reference_grants:
        if grant.namespace != to_namespace:
            continue
        if not any(
            f.group == from_group and f.kind == from_kind and f.namespace == from_namespace
            for f in grant.spec.from_
        ):
            continue
        if any(
            t.group == to_group and t.kind == to_kind and (t.name is None or t.name == to_name)
            for t in grant.spec.to
        ):
            return True
    return False

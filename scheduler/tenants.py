"""Tenant namespaces, as the publisher reads them: the operator's selector
(admission.tenantNamespaceLabels, passed as `TMC_TENANT_NAMESPACE_LABELS`, key=value pairs
separated by commas) names the namespaces whose pods tmc places. The engine and tmc-nri trust no
placement elsewhere (the admission policy judges none there), so the ledger's mirror counts none
either, and no pod elsewhere makes the publisher publish.

The API types' parser (v1alpha1.ParseTenantNamespaceLabels) is the rule; this one is held to it by
the shared table scheduler/conformance/tenant_selectors.json. The API server, given the selector
back as a label selector, does the matching."""

from __future__ import annotations

import re

MAX_TENANT_NAMESPACE_LABELS = 16
# The longest text 16 labels can be: a key of 253 + "/" + 63 characters, "=", a value, ",".
_MAX_TEXT = MAX_TENANT_NAMESPACE_LABELS * (253 + 1 + 63 + 1)
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class TenantSelectorError(ValueError):
    """The selector's text is not one the engine would accept."""


def _is_label_key(key: str) -> bool:
    prefix, slash, name = key.rpartition("/")
    if slash and not (0 < len(prefix) <= 253 and _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def _is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_NAME.match(value)))


def parse_tenant_namespace_labels(text: str) -> dict[str, str]:
    """The labels a tenant namespace carries, all of them ({}: every namespace)."""
    if len(text) > _MAX_TEXT:
        raise TenantSelectorError(
            f"a selector of {len(text)} characters is longer than "
            f"{MAX_TENANT_NAMESPACE_LABELS} labels can be"
        )
    labels: dict[str, str] = {}
    for raw in text.split(","):
        pair = raw.strip()
        if not pair:
            continue
        key, eq, value = pair.partition("=")
        if not eq:
            raise TenantSelectorError(f"{pair[:80]!r} is not key=value")
        if key in labels:
            raise TenantSelectorError(f"label {key[:80]!r} is given twice")
        labels[key] = value
    if len(labels) > MAX_TENANT_NAMESPACE_LABELS:
        raise TenantSelectorError(
            f"at most {MAX_TENANT_NAMESPACE_LABELS} labels select tenant namespaces, "
            f"not {len(labels)}"
        )
    for key, value in labels.items():
        if not _is_label_key(key):
            raise TenantSelectorError(f"{key[:80]!r} is not a label key")
        if not _is_label_value(value):
            raise TenantSelectorError(f"{key}: {value[:80]!r} is not a label value")
    return labels


def selector_text(labels: dict[str, str]) -> str:
    """The selector as the flag writes it, keys sorted; also a label selector the API server
    reads ("" selects every namespace)."""
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))

"""Who may read an experiment when reads are restricted (``XMC_READ_AUTHORIZATION=restricted``,
docs/auth.md, decision 0048): pure, shared by the store (which keeps each experiment's
readers in a column) and the ESS (which turns a caller into the principals it holds).

Both sides speak one vocabulary of **principals**, plain strings compared exactly:

* a user or service account: its email, lowercased (``alice@example.com``);
* ``group:<name>``, lowercased: a group named in an ACL, held by a caller whose token
  lists it in its groups claim;
* ``domain:<domain>``, lowercased: an ACL's domain, held by every caller whose email is in
  it;
* :data:`ALL_AUTHENTICATED_USERS`: held by every caller.

An experiment's readers are its creator and every principal of its ACL's owners, writers
and readers. A caller may read it when the two sets meet; admins and service identities
read everything (:attr:`ReadScope.everything`). Emails hold an ``@`` and the other
principals a ``:`` before any ``@``, so no email can pose as a group or a domain.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

#: The IAM member name of ``Role.all_authenticated_users``; no email can be this string.
ALL_AUTHENTICATED_USERS: Final = "allAuthenticatedUsers"
GROUP_PREFIX: Final = "group:"
DOMAIN_PREFIX: Final = "domain:"


def role_principal(role: XidAcls.Role) -> str | None:
    """The principal an ACL entry grants, or None (an empty entry, ``inherit_from_parent``:
    experiments have no parent, or a user that is not an email and so matches no caller)."""
    kind = role.WhichOneof("principal")
    if kind in ("user", "service_account"):
        email = str(getattr(role, kind)).strip().lower()
        return email if "@" in email else None
    if kind == "group":
        return _prefixed(GROUP_PREFIX, role.group)
    if kind == "domain":
        return _prefixed(DOMAIN_PREFIX, role.domain.lstrip("@"))
    if kind == "all_authenticated_users" and role.all_authenticated_users:
        return ALL_AUTHENTICATED_USERS
    return None


def _prefixed(prefix: str, name: str) -> str | None:
    name = name.strip().lower()
    return prefix + name if name else None


def experiment_readers(creator: str, acls: XidAcls) -> list[str]:
    """Every principal that may read an experiment, sorted and without repeats: what
    ``experiments.readers`` holds (kept in step with the ACL on every write)."""
    found = {creator.strip().lower()} if creator.strip() else set()
    for role in (*acls.owners, *acls.writers, *acls.readers):
        principal = role_principal(role)
        if principal is not None:
            found.add(principal)
    return sorted(found)


def caller_principals(email: str, groups: Iterable[str] = ()) -> frozenset[str]:
    """The principals a caller holds: its email, its email's domain, its groups, and
    :data:`ALL_AUTHENTICATED_USERS`."""
    email = email.strip().lower()
    held = {email, ALL_AUTHENTICATED_USERS}
    _, at, domain = email.rpartition("@")
    if at and domain:
        held.add(DOMAIN_PREFIX + domain)
    for group in groups:
        principal = _prefixed(GROUP_PREFIX, group)
        if principal is not None:
            held.add(principal)
    return frozenset(held)


@dataclass(frozen=True)
class ReadScope:
    """What one caller may read: every experiment (``principals`` None: reads are not
    restricted, or the caller is an admin or a service), or those whose readers include
    one of ``principals``."""

    principals: frozenset[str] | None = None

    @property
    def everything(self) -> bool:
        return self.principals is None

    def can_read(self, readers: Sequence[str] | None) -> bool:
        """Whether an experiment with these readers is readable (None: not known yet,
        a row an older writer left unfilled, is readable only to those who read all)."""
        if self.principals is None:
            return True
        return readers is not None and not self.principals.isdisjoint(readers)

    def sorted_principals(self) -> list[str]:
        """The principals as an SQL ``text[]`` parameter (stable order)."""
        return sorted(self.principals or ())

    def binding(self) -> str:
        """What a page token is bound to so that another caller cannot use it: '' when
        everything is readable (tokens stay as they were without restricted reads)."""
        return "" if self.principals is None else "readers:" + ",".join(self.sorted_principals())


#: The scope of a caller who reads everything.
READS_EVERYTHING: Final = ReadScope()

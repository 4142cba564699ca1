"""A Jupyter server identity provider and authorizer that give an agent one notebook.

Start JupyterLab with both (``rewyn-kernel agent-token`` prints the flags)::

    jupyter lab \\
      --ServerApp.identity_provider_class=rewyn_kernel.server.AgentIdentityProvider \\
      --ServerApp.authorizer_class=rewyn_kernel.server.AgentAuthorizer

The person's token, password and login cookie work as with Jupyter's default provider (this is
a subclass of it) and the person may do everything, as with the default authorizer. A request
whose token (``Authorization: token|bearer X`` or ``?token=X``, read as Jupyter reads them) is an
agent token from ``rewyn-kernel agent-token`` is the agent's: it authenticates only on the
endpoints of ``policy.ROUTES`` and only for the token's notebook, and is refused with 403 in the
identity provider itself otherwise, before any handler runs (the collaboration's room handler
opens a room in ``prepare``, before its ``@authorized`` check). The authorizer checks the same
table again at ``@authorized``, and filters the session list down to the notebook's sessions.

The notebook's kernel websocket carries, for an agent token, only what reading needs; for the
grant's runner token (``rewyn-kernel mcp --notebook``'s), an ``execute_request`` too; for
neither a restart, a shutdown or an interrupt (``channels``). Only the runner token interrupts,
through the REST endpoint.

An agent never gets a login cookie: each request carries the token, so revoking it or letting it
expire shuts the agent out from its next request; its open websockets (kernel channels,
collaboration room) are closed within ``revocation_check_interval`` seconds.
"""

from __future__ import annotations

import json
import sys
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import PasswordIdentityProvider, User
from jupyter_server.base.handlers import JupyterHandler
from tornado import web
from tornado.ioloop import PeriodicCallback
from tornado.websocket import WebSocketHandler
from traitlets import Float, Unicode

from rewyn_kernel.server import channels, policy
from rewyn_kernel.server.tokens import Grant, GrantFile, Holder, default_tokens_file


@dataclass(kw_only=True)
class AgentUser(User):
    """The user of a request made with an agent token: ``agent:NAME``, bound to ``grant``;
    ``runner``: the token is the grant's runner token (``rewyn-kernel mcp --notebook``'s)."""

    grant: Grant
    runner: bool = False


class AgentIdentityProvider(PasswordIdentityProvider):
    """Jupyter's default identity provider, plus the agent tokens of ``tokens_file``."""

    tokens_file = Unicode(
        "",
        config=True,
        help="The agent tokens' file (rewyn-kernel agent-token --tokens-file); empty: "
        "<the server's runtime dir>/rewyn-kernel/agent-tokens.json.",
    )

    revocation_check_interval = Float(
        2.0,
        config=True,
        help="Seconds between checks that close an agent's open websockets once its token is "
        "revoked or expired (requests are checked each time).",
    )

    _grants: GrantFile | None = None
    _problem: str | None = None
    _watch: PeriodicCallback | None = None
    _open: weakref.WeakKeyDictionary[WebSocketHandler, Grant]

    def grant_file(self) -> GrantFile:
        if self._grants is None:
            path = self.tokens_file or default_tokens_file(
                getattr(self.parent, "runtime_dir", None)
            )
            self._grants = GrantFile(Path(path))
            self.log.info("Agent tokens (rewyn-kernel agent-token) are read from %s", path)
        return self._grants

    async def get_user_token(self, handler: web.RequestHandler) -> User | None:
        token = self.get_token(handler)
        if token:
            grants = self.grant_file()
            holder = grants.lookup(token)
            if grants.problem != self._problem:
                self._problem = grants.problem
                if grants.problem:
                    self.log.error("Agent tokens: %s", grants.problem)
            if holder is not None:
                return await self._agent(handler, holder)
        user: User | None = await super().get_user_token(handler)
        return user

    async def _agent(self, handler: web.RequestHandler, holder: Holder) -> AgentUser:
        assert isinstance(handler, JupyterHandler)
        grant = holder.grant
        reason = await policy.refusal(handler, grant, runner=holder.runner)
        where = f"{handler.request.method} {handler.request.path}"
        if reason is not None:
            self.log.warning("Agent %r (%s) refused: %s: %s", grant.name, grant.path, where, reason)
            raise web.HTTPError(403, f"agent token {grant.name!r} ({grant.path}): {reason}")
        self.log.debug("Agent %r (%s): %s", grant.name, grant.path, where)
        if isinstance(handler, WebSocketHandler):
            self._watch_socket(handler, grant)
            if policy.route_of(handler) is policy.KERNEL_CHANNELS:
                allowed = channels.RUNNING if holder.runner else channels.READING
                who = f"Agent {grant.name!r} ({grant.path}{', runner' if holder.runner else ''})"
                channels.guard(handler, allowed, who, self.log)
        return AgentUser(
            username=f"agent:{grant.name}",
            display_name=f"Agent {grant.name}",
            initials="AI",
            grant=grant,
            runner=holder.runner,
        )

    def _watch_socket(self, handler: WebSocketHandler, grant: Grant) -> None:
        """Keep ``handler`` (weakly: a closed socket drops out) to close it with its grant."""
        if self._watch is None:
            self._open = weakref.WeakKeyDictionary()
            self._watch = PeriodicCallback(
                self._close_revoked, self.revocation_check_interval * 1000
            )
            self._watch.start()
        self._open[handler] = grant

    def _close_revoked(self) -> None:
        grants = self.grant_file()
        for handler, grant in list(self._open.items()):
            if not grants.live(grant):
                self.log.warning(
                    "Agent %r (%s): token revoked or expired, closing %s",
                    grant.name,
                    grant.path,
                    handler.request.path,
                )
                del self._open[handler]
                handler.close(1008, "the agent token was revoked or has expired")

    def set_login_cookie(self, handler: web.RequestHandler, user: User) -> None:
        """Persist the person's login; never an agent's (its token is checked on each request)."""
        if not isinstance(user, AgentUser):
            super().set_login_cookie(handler, user)

    def identity_model(self, user: User) -> dict[str, Any]:
        model = asdict(user)
        model.pop("grant", None)
        model.pop("runner", None)
        return model

    def validate_security(self, app: Any, ssl_options: dict[str, Any] | None = None) -> None:
        """Refuse to start without ``AgentAuthorizer``: alone, this provider would let the agent
        list every session."""
        super().validate_security(app, ssl_options)
        if not isinstance(getattr(app, "authorizer", None), AgentAuthorizer):
            self.log.critical(
                "AgentIdentityProvider needs --ServerApp.authorizer_class="
                "rewyn_kernel.server.AgentAuthorizer"
            )
            sys.exit(1)


class AgentAuthorizer(Authorizer):
    """Everything for the person; for an agent, only ``policy.ROUTES`` on its notebook."""

    async def is_authorized(
        self, handler: JupyterHandler, user: User, action: str, resource: str
    ) -> bool:
        if not isinstance(user, AgentUser):
            return True
        route = policy.route_of(handler)
        if route is None or (route.action, route.resource) != (action, resource):
            reason: str | None = f"not {action} on {resource}"
        else:
            reason = await policy.refusal(handler, user.grant, runner=user.runner)
        if reason is not None:
            self.log.warning(
                "Agent %r: %s refused: %s", user.grant.name, handler.request.path, reason
            )
            return False
        if route is policy.SESSION_LIST:
            _own_sessions_only(handler, user.grant)
        return True


def _own_sessions_only(handler: JupyterHandler, grant: Grant) -> None:
    """Make GET /api/sessions answer with the notebook's sessions only.

    No hook of Jupyter's filters a listing, so this wraps this request's ``finish`` (the
    handler writes the list in one ``finish``). A body that is not a list (the listing changed
    shape) becomes ``[]``; an error reply passes as it is.
    """
    finish = handler.finish

    def own_only(chunk: str | bytes | dict[str, Any] | None = None) -> Any:
        if handler.get_status() >= 400 or chunk is None:
            return finish(chunk)
        try:
            listed = json.loads(chunk) if isinstance(chunk, (str, bytes)) else chunk
        except ValueError:
            listed = None
        kept = [
            session
            for session in (listed if isinstance(listed, list) else [])
            if isinstance(session, dict) and policy.same_notebook(session.get("path"), grant)
        ]
        return finish(json.dumps(kept))

    handler.finish = own_only  # type: ignore[method-assign]

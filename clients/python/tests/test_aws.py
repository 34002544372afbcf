"""SigV4 signing, checked two independent ways, and the client against the local AWS stack.

1. A SigV4 verifier written here from AWS's description of the algorithm
   (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html),
   itself checked against the ``get-vanilla`` case of AWS's SigV4 test suite, recomputes
   the signature of the requests the client actually sends (captured on the wire, so the
   ``Host`` with its non-default port is the one sent) and refuses tampered ones.
2. The local AWS stack (``local/localstack/up``, private ports and state directory) with
   the deployment's IAM-auth function URL (``TF_VAR_enable_function_url=true``): its
   emulator recomputes SigV4 as Lambda does and answers AWS's errors; a small
   ``LAMBDAFUSION_MAX_RESPONSE_BYTES`` makes results take the presigned-URL path through
   the stack's S3. Skipped (with the reason) when the stack's binaries or moto_server are
   missing; ``LAMBDAFUSION_PY_STACK=1`` turns that skip into a failure,
   ``LAMBDAFUSION_PY_STACK=0`` skips it always.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Mapping, Optional
from unittest import mock
from urllib.parse import parse_qsl, quote, urlsplit

import lambdafusion
from lambdafusion import Forbidden, NotFound, QueryError
from lambdafusion.sigv4 import SigV4Signer, authority_of, aws_endpoint_service

from .support import BIN, REPO, FakeServer, clean_env, free_port, json_answer, optional

HAVE_BOTOCORE = optional("botocore") is not None


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def _encode(text: str) -> str:
    return quote(text, safe="-_.~")


def verify(
    method: str,
    path_and_query: str,
    headers: Mapping[str, str],
    body: bytes,
    secret: str,
) -> str:
    """Recomputes the SigV4 signature of a received request (headers as received) and
    returns "ok", or the reason it does not verify."""
    lower = {k.lower(): v for k, v in headers.items()}
    auth = lower.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization header"
    fields = dict(
        part.strip().split("=", 1) for part in auth[len("AWS4-HMAC-SHA256 ") :].split(",")
    )
    _key, date, region, service, terminal = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    for required in ("host", "x-amz-date"):
        if required not in signed:
            return f"{required} is not signed"
    timestamp = lower["x-amz-date"]
    if not timestamp.startswith(date) or terminal != "aws4_request":
        return "bad credential scope"
    payload_hash = hashlib.sha256(body).hexdigest()
    if "x-amz-content-sha256" in lower and lower["x-amz-content-sha256"] != payload_hash:
        return "x-amz-content-sha256 is not the body's hash"
    parts = urlsplit(path_and_query)
    query = "&".join(
        f"{_encode(k)}={_encode(v)}"
        for k, v in sorted(parse_qsl(parts.query, keep_blank_values=True))
    )
    canonical_headers = "".join(
        f"{name}:{' '.join(lower[name].strip().split())}\n" for name in signed
    )
    canonical = "\n".join(
        [
            method,
            quote(parts.path or "/", safe="/-_.~"),
            query,
            canonical_headers,
            ";".join(signed),
            payload_hash,
        ]
    )
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", timestamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(f"AWS4{secret}".encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, fields["Signature"]):
        return f"signature mismatch (canonical request:\n{canonical})"
    return "ok"


class VerifierTest(unittest.TestCase):
    def test_the_verifier_passes_awss_get_vanilla_case(self) -> None:
        # AWS SigV4 test suite, get-vanilla: GET / with Host example.amazonaws.com,
        # X-Amz-Date 20150830T123600Z, key AKIDEXAMPLE, region us-east-1, service "service".
        signature = "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"
        headers = {
            "Host": "example.amazonaws.com",
            "X-Amz-Date": "20150830T123600Z",
            "Authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/"
            f"service/aws4_request, SignedHeaders=host;x-amz-date, Signature={signature}",
        }
        secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
        self.assertEqual(verify("GET", "/", headers, b"", secret), "ok")
        self.assertNotEqual(verify("GET", "/", headers, b"", secret + "x"), "ok")
        self.assertNotEqual(verify("GET", "/?a=b", headers, b"", secret), "ok")


@unittest.skipUnless(HAVE_BOTOCORE, "botocore is not installed (the aws extra)")
class SignerTest(unittest.TestCase):
    def setUp(self) -> None:
        self.seen: list = []

        def capture(handler: Any) -> Any:
            self.seen.append((handler.command, handler.path, dict(handler.headers), handler.body))
            if handler.command == "POST":
                return json_answer(202, {"id": "q1", "state": "running"})
            return json_answer(200, {"tables": []})

        self.api = FakeServer({("POST", "/v1/queries"): capture, ("GET", "/v1/tables"): capture})

    def tearDown(self) -> None:
        self.api.stop()

    def connect(
        self, secret: str = "s3cret", token: Optional[str] = None
    ) -> lambdafusion.Connection:
        return lambdafusion.connect(
            self.api.url,
            aws=True,
            region="eu-west-1",
            aws_access_key_id="AKIDTEST",
            aws_secret_access_key=secret,
            aws_session_token=token,
        )

    def test_requests_on_the_wire_verify(self) -> None:
        con = self.connect(token="session-token")
        con.submit("SELECT 'é' AS x", max_seconds=3)
        con.tables()
        self.assertEqual(len(self.seen), 2)
        for method, path, headers, body in self.seen:
            # The Host sent carries the (non-default) port, and that is what was signed.
            self.assertEqual(headers["Host"], f"127.0.0.1:{self.api.url.rsplit(':', 1)[1]}")
            self.assertEqual(verify(method, path, headers, body, "s3cret"), "ok")
            auth = headers["Authorization"]
            self.assertIn("/eu-west-1/lambda/aws4_request", auth)
            signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
            for name in ("host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"):
                self.assertIn(name, signed)
            self.assertEqual(headers["X-Amz-Security-Token"], "session-token")
        method, path, headers, body = self.seen[0]
        self.assertIn("content-type", headers["Authorization"])
        # The body is covered: another body (or a wrong secret) fails to verify.
        self.assertNotEqual(verify(method, path, headers, body + b" ", "s3cret"), "ok")
        self.assertNotEqual(verify(method, path, headers, body, "other"), "ok")

    def test_bearer_token_is_never_mixed_with_signing(self) -> None:
        self.connect().tables()
        self.assertTrue(self.seen[0][2]["Authorization"].startswith("AWS4-HMAC-SHA256 "))

    def test_host_and_service_detection(self) -> None:
        self.assertEqual(authority_of("http://127.0.0.1:9002/v1"), "127.0.0.1:9002")
        self.assertEqual(authority_of("https://h.example:443/x"), "h.example")
        self.assertEqual(authority_of("http://h.example:80"), "h.example")
        self.assertEqual(authority_of("https://h.example:8443"), "h.example:8443")
        self.assertEqual(authority_of("http://[::1]:8080/"), "[::1]:8080")
        self.assertEqual(
            aws_endpoint_service("abc.lambda-url.eu-west-1.on.aws"), ("lambda", "eu-west-1")
        )
        self.assertEqual(
            aws_endpoint_service("abc.execute-api.us-east-2.amazonaws.com"),
            ("execute-api", "us-east-2"),
        )
        self.assertIsNone(aws_endpoint_service("127.0.0.1"))
        env = {
            "AWS_ACCESS_KEY_ID": "AKIDENV",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }
        with mock.patch.dict(os.environ, env, clear=False):
            con = lambdafusion.connect("https://abc.execute-api.us-east-2.amazonaws.com")
        assert con.signer is not None
        self.assertEqual((con.signer.service, con.signer.region), ("execute-api", "us-east-2"))
        plain = lambdafusion.connect("http://127.0.0.1:8080")
        self.assertIsNone(plain.signer)

    def test_missing_region_or_credentials_are_clear_errors(self) -> None:
        env = {
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
            "AWS_EC2_METADATA_DISABLED": "true",
        }
        with mock.patch.dict(os.environ, clean_env(**env), clear=True):
            with self.assertRaises(ValueError) as caught:
                lambdafusion.connect(self.api.url, aws=True)
            self.assertIn("region", str(caught.exception))
            with self.assertRaises(ValueError) as caught:
                lambdafusion.connect(self.api.url, aws=True, region="us-east-1")
            self.assertIn("no AWS credentials found", str(caught.exception))
        with self.assertRaises(ValueError):
            SigV4Signer(region="us-east-1", access_key_id="only-half")


def _stack_skip_reason() -> Optional[str]:
    if os.environ.get("LAMBDAFUSION_PY_STACK") == "0":
        return "LAMBDAFUSION_PY_STACK=0"
    if not HAVE_BOTOCORE:
        return "botocore is not installed (the aws extra)"
    bin_dir = BIN.parent
    missing = [
        b
        for b in ("scheduler-fn", "executor-fn", "lambdafusion-local")
        if not (bin_dir / b).exists()
    ]
    if missing:
        build = "cargo build -p scheduler-fn -p executor-fn -p lambdafusion-local"
        return f"{', '.join(missing)} missing in {bin_dir} ({build})"
    venv = Path(os.environ.get("VENV", REPO / ".venv"))
    if not (venv / "bin" / "moto_server").exists():
        return f"moto_server missing in {venv} (pip install -r local/requirements.txt)"
    return None


class LocalStack:
    """``local/localstack/up`` on private ports with its own state directory."""

    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="lambdafusion-py-stack-"))
        ports = {
            name: str(free_port())
            for name in ("MOTO_PORT", "INVOKE_PORT", "URL_PORT", "FRONT_PORT")
        }
        if len(set(ports.values())) != 4:
            ports = {name: str(free_port()) for name in ports}
        self.env = clean_env(
            STATE_DIR=str(self.state),
            SKIP_BUILD="1",
            CARGO_TARGET_DIR=str(BIN.parent.parent),
            TF_VAR_enable_function_url="true",
            LAMBDAFUSION_MAX_RESPONSE_BYTES="2000",
            SCHEDULER_INSTANCES="2",
            EXECUTOR_INSTANCES="2",
            FRONT_LATENCY="off",
            LAMBDA_TIMING="fast",
            FUNCTION_RUST_LOG="warn",
            **ports,
        )
        if "VENV" in os.environ:
            self.env["VENV"] = os.environ["VENV"]
        self.url = f"http://127.0.0.1:{ports['URL_PORT']}"
        up = subprocess.run(
            [str(REPO / "local/localstack/up")],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if up.returncode != 0:
            self.stop()
            raise RuntimeError(f"local/localstack/up failed:\n{up.stdout}\n{up.stderr}")

    def stop(self) -> None:
        subprocess.run(
            [str(REPO / "local/localstack/down")],
            cwd=REPO,
            env=self.env,
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(self.state, ignore_errors=True)


AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "test",
    "AWS_SECRET_ACCESS_KEY": "test",
    "AWS_REGION": "us-east-1",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "AWS_EC2_METADATA_DISABLED": "true",
}


class FunctionUrlTest(unittest.TestCase):
    """The deployment's IAM-auth function URL on the local stack."""

    stack: Optional[LocalStack] = None

    @classmethod
    def setUpClass(cls) -> None:
        reason = _stack_skip_reason()
        if reason is not None:
            if os.environ.get("LAMBDAFUSION_PY_STACK") == "1":
                raise RuntimeError(f"LAMBDAFUSION_PY_STACK=1 but the stack cannot run: {reason}")
            raise unittest.SkipTest(f"local AWS stack: {reason}")
        cls.stack = LocalStack()

    @classmethod
    def tearDownClass(cls) -> None:
        if cls.stack is not None:
            cls.stack.stop()

    def alice(self) -> lambdafusion.Connection:
        # Credentials from botocore's default chain (the environment here).
        with mock.patch.dict(os.environ, AWS_ENV):
            return lambdafusion.connect(self.stack.url, aws=True, timeout=30)

    def test_signed_queries_small_and_large_results_and_callers(self) -> None:
        assert self.stack is not None
        alice = self.alice()
        self.assertEqual(alice.sql("SELECT 40 + 2 AS answer").to_pydict(), {"answer": [42]})

        # Larger than the 2000 bytes one response may carry: 413 inline, so the client
        # downloads the pieces from the stack's S3 through presigned URLs.
        sql = (
            "SELECT value AS v, 'row number ' || CAST(value AS VARCHAR) AS label "
            "FROM range(0, 3000)"
        )
        query = alice.submit(sql)
        table = query.result()
        self.assertEqual(table.num_rows, 3000)
        rows = sorted(zip(table.column("v").to_pylist(), table.column("label").to_pylist()))
        self.assertEqual(rows, [(i, f"row number {i}") for i in range(3000)])
        with self.assertRaises(QueryError) as caught:
            alice._transport.request(
                "GET", f"/v1/queries/{query.id}/result", query={"format": "arrow"}
            )
        self.assertEqual(caught.exception.status, 413)
        self.assertIn("/result/objects", str(caught.exception))
        objects = query.result_objects()
        self.assertEqual(objects["format"], "arrow-ipc-stream")
        self.assertTrue(objects["pieces"])
        self.assertTrue(all("X-Amz-Signature=" in p["url"] for p in objects["pieces"]))

        # Another caller (explicit credentials) does not see alice's query.
        bob = lambdafusion.connect(
            self.stack.url,
            region="us-east-1",
            aws_access_key_id="other",
            aws_secret_access_key="other",
        )
        with self.assertRaises(NotFound):
            bob.query(query.id).status()
        self.assertEqual(bob.sql("SELECT 1 AS one").to_pydict(), {"one": [1]})

    def test_unsigned_and_wrongly_signed_requests_are_forbidden(self) -> None:
        assert self.stack is not None
        try:
            urllib.request.urlopen(self.stack.url + "/v1/tables", timeout=10)
            self.fail("an unsigned request must be refused")
        except urllib.error.HTTPError as answer:
            expected = json.loads(answer.read())["Message"]
        unsigned = lambdafusion.connect(self.stack.url, aws=False)
        with self.assertRaises(Forbidden) as caught:
            unsigned.tables()
        self.assertEqual(str(caught.exception), expected)
        self.assertTrue(expected.startswith("Forbidden."), expected)

        forged = lambdafusion.connect(
            self.stack.url,
            region="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="wrong",
        )
        with self.assertRaises(Forbidden) as caught:
            forged.sql("SELECT 1")
        self.assertTrue(
            str(caught.exception).startswith(
                "The request signature we calculated does not match the signature you provided."
            ),
            str(caught.exception),
        )


if __name__ == "__main__":
    unittest.main()

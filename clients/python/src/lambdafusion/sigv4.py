"""AWS Signature Version 4 for requests to a deployment behind IAM auth.

A lambdafusion deployment is reached through a Lambda function URL with
``AuthType: AWS_IAM`` (service ``lambda``) or an API Gateway HTTP API with IAM
authorization (service ``execute-api``). Both need every request signed with SigV4
(https://docs.aws.amazon.com/lambda/latest/dg/urls-auth.html,
https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_sigv.html).

Signing uses botocore (the ``aws`` extra: ``pip install 'lambdafusion[aws]'``):
``botocore.auth.SigV4Auth`` with credentials given explicitly or found by botocore's
default chain (environment, ``~/.aws`` files and profiles, SSO, container and instance
roles). What is signed:

* the ``Host`` header exactly as it is sent: the host, plus the port unless it is the
  scheme's default (``127.0.0.1:9002`` signs as such);
* ``X-Amz-Date``, ``X-Amz-Content-SHA256`` (the SHA-256 of the body, so the body is
  covered), ``Content-Type`` when there is a body, and ``X-Amz-Security-Token`` for
  temporary credentials;
* the method, path and query string.

Presigned result URLs carry their own signature in the query string: they are fetched
without any of these headers.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import urlsplit

__all__ = ["SigV4Signer", "aws_endpoint_service", "authority_of"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def authority_of(url: str) -> str:
    """The ``Host`` header for ``url``: its host, with the port unless it is the scheme's
    default. IPv6 addresses keep their brackets."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    if port is not None and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        return f"{host}:{port}"
    return host


def aws_endpoint_service(host: str) -> Optional[Tuple[str, str]]:
    """``(service, region)`` when ``host`` is an AWS endpoint a deployment is reached
    through: ``<id>.lambda-url.<region>.on.aws`` (``lambda``) or
    ``<id>.execute-api.<region>.amazonaws.com`` (``execute-api``); else ``None``."""
    labels = host.lower().rstrip(".").split(".")
    if len(labels) >= 5 and labels[1] == "lambda-url" and host.lower().endswith(".on.aws"):
        return "lambda", labels[2]
    if len(labels) >= 5 and labels[1] == "execute-api" and host.lower().endswith(".amazonaws.com"):
        return "execute-api", labels[2]
    return None


def _missing_botocore() -> ImportError:
    return ImportError(
        "signing requests with AWS SigV4 needs botocore: pip install 'lambdafusion[aws]'"
    )


class SigV4Signer:
    """Signs HTTP requests with SigV4 for one service and region.

    Args:
        region: the AWS region the endpoint is in (``us-east-1``).
        service: ``lambda`` for a function URL, ``execute-api`` for API Gateway.
        access_key_id, secret_access_key, session_token: explicit credentials; without
            them botocore's default chain is asked (``profile`` picks a named profile).
        profile: a profile of ``~/.aws/config`` / ``~/.aws/credentials``.

    Raises:
        ImportError: botocore is not installed.
    """

    def __init__(
        self,
        *,
        region: str,
        service: str = "lambda",
        access_key_id: Optional[str] = None,
        secret_access_key: Optional[str] = None,
        session_token: Optional[str] = None,
        profile: Optional[str] = None,
    ) -> None:
        try:
            import botocore.auth  # noqa: F401
            import botocore.awsrequest  # noqa: F401
            import botocore.credentials
            import botocore.session
        except ImportError as e:  # pragma: no cover - exercised only without botocore
            raise _missing_botocore() from e
        if not region:
            raise ValueError("SigV4 signing needs a region (region='us-east-1')")
        if (access_key_id is None) != (secret_access_key is None):
            raise ValueError("give both access_key_id and secret_access_key, or neither")
        self.region = region
        self.service = service
        self._credentials: Any
        if access_key_id is not None:
            self._credentials = botocore.credentials.Credentials(
                access_key_id, secret_access_key, session_token
            )
        else:
            session = botocore.session.Session(profile=profile)
            credentials = session.get_credentials()
            if credentials is None:
                raise ValueError(
                    "no AWS credentials found by botocore's default chain (environment "
                    "variables, ~/.aws/credentials and config, SSO, container or instance "
                    "role); configure them or pass access_key_id / secret_access_key"
                )
            self._credentials = credentials

    def headers(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        body: bytes = b"",
    ) -> Dict[str, str]:
        """The headers to send for the request: ``headers`` plus ``Host``,
        ``X-Amz-Date``, ``X-Amz-Content-SHA256``, ``Authorization`` (and
        ``X-Amz-Security-Token`` for temporary credentials)."""
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        # Refreshable credentials (roles, SSO) renew themselves here when near expiry.
        frozen = (
            self._credentials.get_frozen_credentials()
            if hasattr(self._credentials, "get_frozen_credentials")
            else self._credentials
        )
        to_sign = {k: v for k, v in headers.items() if k.lower() != "host"}
        to_sign["Host"] = authority_of(url)
        to_sign["X-Amz-Content-SHA256"] = hashlib.sha256(body).hexdigest()
        request = AWSRequest(method=method.upper(), url=url, data=body, headers=to_sign)
        SigV4Auth(frozen, self.service, self.region).add_auth(request)
        return {k: v for k, v in request.headers.items()}

//! SigV4 signing for clients of a deployment whose HTTP entry uses IAM authorization (the
//! Terraform default): API Gateway (`execute-api`) or a Lambda function URL (`lambda`).
//! Credentials and region come from the standard AWS chain.

use std::time::SystemTime;

use aws_credential_types::provider::ProvideCredentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

/// The signing service of an endpoint URL's host, if it is an AWS one.
pub fn service_for(host: &str) -> Option<&'static str> {
    if host.contains(".execute-api.") && host.ends_with(".amazonaws.com") {
        Some("execute-api")
    } else if host.contains(".lambda-url.") && host.ends_with(".on.aws") {
        Some("lambda")
    } else {
        None
    }
}

/// The region in an AWS endpoint host (`<id>.execute-api.<region>.amazonaws.com`,
/// `<id>.lambda-url.<region>.on.aws`).
pub fn region_of(host: &str) -> Option<&str> {
    let mut parts = host.split('.');
    parts.next()?;
    parts.next()?;
    parts.next()
}

/// Signs requests with the caller's AWS credentials.
#[derive(Debug)]
pub struct RequestSigner {
    provider: aws_credential_types::provider::SharedCredentialsProvider,
    region: String,
    service: &'static str,
}

/// Signing failed (no credentials, bad request).
#[derive(Debug, thiserror::Error)]
#[error("cannot sign the request with AWS credentials: {0}")]
pub struct SigningError(String);

impl SigningError {
    /// A signing error saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into())
    }
}

impl RequestSigner {
    /// A signer for `service` in `region` (or the configured region), with credentials
    /// from the standard chain (environment, profile, SSO, instance role).
    pub async fn from_env(
        service: &'static str,
        region: Option<&str>,
    ) -> Result<Self, SigningError> {
        let config = crate::clients::sdk_config().await;
        let provider = config
            .credentials_provider()
            .ok_or_else(|| SigningError("no AWS credentials configured".into()))?;
        let region = region
            .map(str::to_string)
            .or_else(|| config.region().map(|r| r.to_string()))
            .ok_or_else(|| SigningError("no AWS region configured (set AWS_REGION)".into()))?;
        Ok(Self {
            provider,
            region,
            service,
        })
    }

    /// A signer for `service` in `region` with fixed credentials (a second identity in
    /// a test, a tool with its own keys).
    pub fn with_credentials(
        access_key: &str,
        secret_key: &str,
        service: &'static str,
        region: &str,
    ) -> Self {
        let credentials = aws_credential_types::Credentials::new(
            access_key,
            secret_key,
            None,
            None,
            "lambdafusion",
        );
        Self {
            provider: aws_credential_types::provider::SharedCredentialsProvider::new(credentials),
            region: region.to_string(),
            service,
        }
    }

    /// The headers to add to a request to sign it.
    pub async fn headers(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
    ) -> Result<Vec<(String, String)>, SigningError> {
        let credentials = self
            .provider
            .provide_credentials()
            .await
            .map_err(|e| SigningError(e.to_string()))?;
        let identity: Identity = credentials.into();
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(self.service)
            .time(SystemTime::now())
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| SigningError(e.to_string()))?
            .into();
        let request = SignableRequest::new(
            method,
            url,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            SignableBody::Bytes(body),
        )
        .map_err(|e| SigningError(e.to_string()))?;
        let (instructions, _) = sign(request, &params)
            .map_err(|e| SigningError(e.to_string()))?
            .into_parts();
        Ok(instructions
            .headers()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_endpoints_are_recognized() {
        assert_eq!(
            service_for("abc123.execute-api.eu-west-1.amazonaws.com"),
            Some("execute-api")
        );
        assert_eq!(
            service_for("xyz.lambda-url.us-east-1.on.aws"),
            Some("lambda")
        );
        assert_eq!(service_for("127.0.0.1"), None);
        assert_eq!(service_for("example.com"), None);
        assert_eq!(
            region_of("abc123.execute-api.eu-west-1.amazonaws.com"),
            Some("eu-west-1")
        );
        assert_eq!(
            region_of("xyz.lambda-url.us-east-1.on.aws"),
            Some("us-east-1")
        );
    }
}

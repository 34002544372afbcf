//! AWS SDK configuration shared by every client: the standard credential and region
//! chain, endpoint overrides (`AWS_ENDPOINT_URL`, `AWS_ENDPOINT_URL_<SERVICE>`) for the
//! local stack, and the rustls/ring HTTP client (the same crypto object_store uses).

use aws_config::{BehaviorVersion, SdkConfig};
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};

/// The HTTP client every SDK client uses (rustls with ring).
pub fn http_client() -> aws_smithy_runtime_api::client::http::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// Loads the SDK configuration from the environment.
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .http_client(http_client())
        .load()
        .await
}

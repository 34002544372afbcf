//! The AWS Glue Data Catalog through `aws-sdk-glue`: the three read calls the catalog
//! needs ([`lambdafusion::glue::GlueClient`]), every page of each, with Glue's errors
//! turned into ours (a denied call is a 403 naming the action and the table).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_glue::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_glue::types::{Column, StorageDescriptor};
use lambdafusion::glue::{GlueClient, GlueColumn, GluePartition, GlueTable};
use lambdafusion::{Error, Result};

/// Most pages one listing may take (Glue returns up to 100 tables or 1,000 partitions a
/// page): a catalog that answers forever is not followed forever.
const MAX_PAGES: usize = 1_000;

/// Glue through the SDK. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct SdkGlue {
    client: aws_sdk_glue::Client,
}

impl SdkGlue {
    /// A client of Glue in the SDK configuration's region and endpoint
    /// (`AWS_ENDPOINT_URL_GLUE` on the local stack).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            client: aws_sdk_glue::Client::new(sdk),
        }
    }
}

/// Glue's error about `what` (`glue:GetTable on sales.orders`) as ours.
fn error<E>(what: &str, e: SdkError<E>) -> Error
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let code = e.code().unwrap_or_default().to_string();
    let message = e.message().unwrap_or_default().to_string();
    match code.as_str() {
        "AccessDeniedException" => Error::Forbidden(format!(
            "{what} was denied: {message} (the deployment's glue_databases grant it)"
        )),
        "EntityNotFoundException" => Error::NotFound(format!("{what}: {message}")),
        "InvalidInputException" => Error::InvalidInput(format!("{what}: {message}")),
        _ => Error::Internal(format!("{what} failed: {}", DisplayErrorContext(&e))),
    }
}

fn columns(list: Option<&[Column]>) -> Vec<GlueColumn> {
    list.unwrap_or_default()
        .iter()
        .map(|c| GlueColumn {
            name: c.name().to_string(),
            type_name: c.r#type().unwrap_or_default().to_string(),
        })
        .collect()
}

fn parameters(map: Option<&HashMap<String, String>>) -> HashMap<String, String> {
    map.cloned().unwrap_or_default()
}

#[async_trait]
impl GlueClient for SdkGlue {
    async fn table_names(&self, database: &str) -> Result<Vec<String>> {
        let mut names = Vec::new();
        let mut token = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .get_tables()
                .database_name(database)
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| error(&format!("glue:GetTables on {database}"), e))?;
            names.extend(page.table_list().iter().map(|t| t.name().to_string()));
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(names);
            }
        }
        Err(Error::Internal(format!(
            "glue:GetTables on {database} returned more than {MAX_PAGES} pages"
        )))
    }

    async fn table(&self, database: &str, name: &str) -> Result<Option<GlueTable>> {
        let what = format!("glue:GetTable on {database}.{name}");
        let answer = match self
            .client
            .get_table()
            .database_name(database)
            .name(name)
            .send()
            .await
        {
            Ok(answer) => answer,
            Err(e) if e.code() == Some("EntityNotFoundException") => return Ok(None),
            Err(e) => return Err(error(&what, e)),
        };
        let Some(table) = answer.table() else {
            return Ok(None);
        };
        let storage: Option<&StorageDescriptor> = table.storage_descriptor();
        let serde = storage.and_then(|s| s.serde_info());
        Ok(Some(GlueTable {
            database: database.to_string(),
            name: table.name().to_string(),
            table_type: table.table_type().map(str::to_string),
            parameters: parameters(table.parameters()),
            location: storage.and_then(|s| s.location()).map(str::to_string),
            input_format: storage.and_then(|s| s.input_format()).map(str::to_string),
            serde: serde
                .and_then(|s| s.serialization_library())
                .map(str::to_string),
            serde_parameters: parameters(serde.and_then(|s| s.parameters())),
            columns: columns(storage.map(|s| s.columns())),
            partition_keys: columns(Some(table.partition_keys())),
        }))
    }

    async fn partitions(
        &self,
        database: &str,
        table: &str,
        expression: Option<&str>,
    ) -> Result<Vec<GluePartition>> {
        let what = format!("glue:GetPartitions on {database}.{table}");
        let mut out = Vec::new();
        let mut token = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .client
                .get_partitions()
                .database_name(database)
                .table_name(table)
                .set_expression(expression.map(str::to_string))
                .set_next_token(token)
                .send()
                .await
                .map_err(|e| error(&what, e))?;
            out.extend(page.partitions().iter().map(|p| {
                GluePartition {
                    values: p.values().to_vec(),
                    location: p
                        .storage_descriptor()
                        .and_then(|s| s.location())
                        .map(str::to_string),
                }
            }));
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_string);
            if token.is_none() {
                return Ok(out);
            }
        }
        Err(Error::Internal(format!(
            "{what} returned more than {MAX_PAGES} pages"
        )))
    }
}

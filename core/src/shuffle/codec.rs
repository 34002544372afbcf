//! [`LambdaFusionCodec`]: the datafusion-proto extension codec for the shuffle nodes, so a
//! whole stage plan (writer at the root, readers at the leaves) encodes to one byte string.

use std::sync::Arc;

use datafusion::arrow::datatypes::Schema;
use datafusion::error::{DataFusionError, Result as DfResult};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::from_proto::parse_protobuf_partitioning;
use datafusion_proto::physical_plan::to_proto::serialize_partitioning;
use datafusion_proto::physical_plan::{
    PhysicalExtensionCodec, PhysicalPlanDecodeContext, PhysicalProtoConverterExtension,
};
use datafusion_proto::protobuf;
use prost::Message;

use super::{ReadMode, ShuffleReaderExec, ShuffleWriterExec};

/// Encoded [`ShuffleWriterExec`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShuffleWriterNode {
    /// Stage id.
    #[prost(uint32, tag = "1")]
    pub stage: u32,
    /// Hash partitioning; absent for a single slice.
    #[prost(message, optional, tag = "2")]
    pub partitioning: Option<protobuf::Partitioning>,
}

/// Encoded [`ShuffleReaderExec`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct ShuffleReaderNode {
    /// Stage read.
    #[prost(uint32, tag = "1")]
    pub stage: u32,
    /// Producer task count.
    #[prost(uint32, tag = "2")]
    pub producers: u32,
    /// 0 = hash, 1 = gather, 2 = all.
    #[prost(uint32, tag = "3")]
    pub mode: u32,
    /// Output schema.
    #[prost(message, optional, tag = "4")]
    pub schema: Option<protobuf::Schema>,
    /// Hash partitioning (hash mode only).
    #[prost(message, optional, tag = "5")]
    pub partitioning: Option<protobuf::Partitioning>,
}

/// The one extension message: exactly one field is set.
#[derive(Clone, PartialEq, prost::Message)]
pub struct LambdaFusionNode {
    /// A writer.
    #[prost(message, optional, tag = "1")]
    pub writer: Option<ShuffleWriterNode>,
    /// A reader.
    #[prost(message, optional, tag = "2")]
    pub reader: Option<ShuffleReaderNode>,
}

/// Extension codec for lambdafusion's execution nodes.
#[derive(Debug, Default, Clone, Copy)]
pub struct LambdaFusionCodec;

fn codec_err(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Internal(format!("lambdafusion codec: {}", msg.into()))
}

impl PhysicalExtensionCodec for LambdaFusionCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let node = LambdaFusionNode::decode(buf).map_err(|e| codec_err(e.to_string()))?;
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        match (node.writer, node.reader) {
            (Some(w), None) => {
                let [input] = inputs else {
                    return Err(codec_err(format!(
                        "writer needs one input, got {}",
                        inputs.len()
                    )));
                };
                let partitioning = parse_protobuf_partitioning(
                    w.partitioning.as_ref(),
                    &decode_ctx,
                    input.schema().as_ref(),
                    proto_converter,
                )?;
                Ok(Arc::new(
                    ShuffleWriterExec::try_new(w.stage, input.clone(), partitioning)
                        .map_err(DataFusionError::from)?,
                ))
            }
            (None, Some(r)) => {
                let schema = r
                    .schema
                    .as_ref()
                    .ok_or_else(|| codec_err("reader without schema"))?;
                let schema = Arc::new(Schema::try_from(schema)?);
                let mode = match r.mode {
                    0 => ReadMode::Hash(
                        parse_protobuf_partitioning(
                            r.partitioning.as_ref(),
                            &decode_ctx,
                            &schema,
                            proto_converter,
                        )?
                        .ok_or_else(|| codec_err("hash reader without partitioning"))?,
                    ),
                    1 => ReadMode::Gather,
                    2 => ReadMode::All,
                    other => return Err(codec_err(format!("unknown reader mode {other}"))),
                };
                Ok(Arc::new(ShuffleReaderExec::new(
                    r.stage,
                    r.producers as usize,
                    mode,
                    schema,
                    None,
                )))
            }
            _ => Err(codec_err(
                "extension node is neither a shuffle writer nor a reader",
            )),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        let message = if let Some(w) = node.downcast_ref::<ShuffleWriterExec>() {
            LambdaFusionNode {
                writer: Some(ShuffleWriterNode {
                    stage: w.stage(),
                    partitioning: w
                        .partitioning()
                        .map(|p| serialize_partitioning(p, self, proto_converter))
                        .transpose()?,
                }),
                reader: None,
            }
        } else if let Some(r) = node.downcast_ref::<ShuffleReaderExec>() {
            let (mode, partitioning) = match r.mode() {
                ReadMode::Hash(p) => (0, Some(serialize_partitioning(p, self, proto_converter)?)),
                ReadMode::Gather => (1, None),
                ReadMode::All => (2, None),
            };
            LambdaFusionNode {
                writer: None,
                reader: Some(ShuffleReaderNode {
                    stage: r.stage(),
                    producers: r.producers() as u32,
                    mode,
                    schema: Some(protobuf::Schema::try_from(r.schema().as_ref())?),
                    partitioning,
                }),
            }
        } else {
            return Err(DataFusionError::NotImplemented(format!(
                "lambdafusion cannot distribute a plan containing {}: it has no encoding",
                node.name()
            )));
        };
        message
            .encode(buf)
            .map_err(|e| codec_err(format!("encode: {e}")))
    }
}

//! [`LambdaFusionCodec`]: the datafusion-proto extension codec for the shuffle nodes, so a
//! whole stage plan (writer at the root, readers at the leaves) encodes to one byte string.

use crate::write::sink::TableWriterExec;
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
use crate::format_scan::FormatScanExec;
use crate::plan::marks::{MarkCombineExec, TaskJoinExec};
use crate::plan::single_task::{SingleTaskExec, WorkTableRef};
use datafusion::common::JoinType;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::sorts::partial_sort::PartialSortExec;
use datafusion_proto::physical_plan::from_proto::parse_physical_sort_exprs;
use datafusion_proto::physical_plan::to_proto::serialize_physical_sort_exprs;

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
    /// Columns of one value in every row ([`ShuffleReaderExec::constant_columns`]).
    #[prost(message, repeated, tag = "6")]
    pub constants: Vec<ConstantColumn>,
}

/// A column of one value in every row a reader reads.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ConstantColumn {
    /// The column's index.
    #[prost(uint32, tag = "1")]
    pub index: u32,
    /// Its value, when known.
    #[prost(message, optional, tag = "2")]
    pub value: Option<datafusion_proto::protobuf::ScalarValue>,
}

/// Encoded [`TaskJoinExec`] (its one input is the join).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TaskJoinNode {}

/// Encoded [`MarkCombineExec`] (inputs: the build rows, the marks).
#[derive(Clone, PartialEq, prost::Message)]
pub struct MarkCombineNode {
    /// 0 = left semi, 1 = left anti, 2 = left mark.
    #[prost(uint32, tag = "1")]
    pub join_type: u32,
    /// The join's projection, if it has one.
    #[prost(uint32, repeated, tag = "2")]
    pub projection: Vec<u32>,
    /// Whether `projection` is set (an empty one is a projection too).
    #[prost(bool, tag = "3")]
    pub projected: bool,
    /// The join's fetch (row limit).
    #[prost(uint64, optional, tag = "4")]
    pub fetch: Option<u64>,
}

/// A window node whose reversed functions datafusion-proto cannot carry
/// ([`crate::plan::encoding`]): the node as it encodes them turned back, and which to
/// reverse again.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WindowNode {
    /// The window node (its input included), encoded.
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// Per window function, in order: reversed by DataFusion.
    #[prost(bool, repeated, tag = "2")]
    pub reversed: Vec<bool>,
}

/// An aggregate grouped by empty grouping sets only (`GROUPING SETS (())`), which
/// datafusion-proto reads back as no grouping at all ([`crate::plan::encoding`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct EmptyGroupingSetsNode {
    /// The aggregate node (its input included), encoded.
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// How many empty grouping sets it has.
    #[prost(uint32, tag = "2")]
    pub sets: u32,
}

/// A scan of compressed files (CSV, JSON), whose compression datafusion-proto does not
/// carry ([`crate::plan::encoding`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompressedScanNode {
    /// The scan node, encoded.
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
    /// Its compression (`GZIP`, `BZIP2`, `XZ`, `ZSTD`).
    #[prost(string, tag = "2")]
    pub compression: String,
}

/// A table format's scan ([`crate::format_scan::FormatScanExec`]): deleted rows, columns by
/// field id.
#[derive(Clone, PartialEq, prost::Message)]
pub struct FormatScanNode {
    /// The table directory.
    #[prost(string, tag = "1")]
    pub root: String,
    /// The deletions by object path, as JSON.
    #[prost(string, tag = "2")]
    pub deletions: String,
    /// The scan, encoded.
    #[prost(bytes = "vec", tag = "3")]
    pub scan: Vec<u8>,
    /// The columns' field ids by name, as JSON (empty: columns are matched by name).
    #[prost(string, tag = "4")]
    pub field_ids: String,
    /// Whether the node outputs only `output`'s columns of its scan.
    #[prost(bool, tag = "5")]
    pub has_output: bool,
    /// Those columns.
    #[prost(uint32, repeated, tag = "6")]
    pub output: Vec<u32>,
}

/// A sub-plan run whole in one task ([`crate::plan::single_task`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SingleTaskNode {
    /// The sub-plan, encoded.
    #[prost(bytes = "vec", tag = "1")]
    pub plan: Vec<u8>,
}

/// A recursive query (inputs: its static term, its recursive term).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RecursiveQueryNode {
    /// Its name (the work table's).
    #[prost(string, tag = "1")]
    pub name: String,
    /// `UNION` rather than `UNION ALL`.
    #[prost(bool, tag = "2")]
    pub is_distinct: bool,
    /// Its output schema.
    #[prost(message, optional, tag = "3")]
    pub schema: Option<protobuf::Schema>,
}

/// A reader of a recursive query's work table.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WorkTableNode {
    /// The work table's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// The work table's full schema.
    #[prost(message, optional, tag = "2")]
    pub schema: Option<protobuf::Schema>,
    /// The columns the reader keeps.
    #[prost(uint32, repeated, tag = "3")]
    pub projection: Vec<u32>,
    /// Whether `projection` applies.
    #[prost(bool, tag = "4")]
    pub projected: bool,
}

/// A partial sort (its one input: the partially sorted rows), which datafusion-proto does
/// not encode.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PartialSortNode {
    /// The sort order.
    #[prost(message, repeated, tag = "1")]
    pub expr: Vec<protobuf::PhysicalSortExprNode>,
    /// How many leading sort keys the input is already sorted by.
    #[prost(uint64, tag = "2")]
    pub common_prefix_length: u64,
    /// Its row limit.
    #[prost(uint64, optional, tag = "3")]
    pub fetch: Option<u64>,
    /// Whether it keeps its input's partitions.
    #[prost(bool, tag = "4")]
    pub preserve_partitioning: bool,
}

/// A writing stage's table writer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TableWriterNode {
    /// Its [`WriteTarget`](crate::write::WriteTarget), as JSON.
    #[prost(string, tag = "1")]
    pub target: String,
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
    /// A per-probe-partition join.
    #[prost(message, optional, tag = "3")]
    pub task_join: Option<TaskJoinNode>,
    /// A combination of per-task marks.
    #[prost(message, optional, tag = "4")]
    pub mark_combine: Option<MarkCombineNode>,
    /// A window node with reversed functions.
    #[prost(message, optional, tag = "5")]
    pub window: Option<WindowNode>,
    /// An aggregate of empty grouping sets.
    #[prost(message, optional, tag = "6")]
    pub empty_grouping_sets: Option<EmptyGroupingSetsNode>,
    /// A sub-plan run whole in one task.
    #[prost(message, optional, tag = "7")]
    pub single_task: Option<SingleTaskNode>,
    /// A recursive query.
    #[prost(message, optional, tag = "8")]
    pub recursive_query: Option<RecursiveQueryNode>,
    /// A work table reader.
    #[prost(message, optional, tag = "9")]
    pub work_table: Option<WorkTableNode>,
    /// A partial sort.
    #[prost(message, optional, tag = "10")]
    pub partial_sort: Option<PartialSortNode>,
    /// A scan of compressed files.
    #[prost(message, optional, tag = "11")]
    pub compressed_scan: Option<CompressedScanNode>,
    /// A Delta scan's deletion vectors.
    #[prost(message, optional, tag = "12")]
    pub format_scan: Option<FormatScanNode>,
    /// A table writer.
    #[prost(message, optional, tag = "13")]
    pub table_writer: Option<TableWriterNode>,
}

const MARK_JOIN_TYPES: [JoinType; 3] = [JoinType::LeftSemi, JoinType::LeftAnti, JoinType::LeftMark];

/// Whether `plan` is one of the nodes [`LambdaFusionCodec`] encodes.
pub fn is_extension(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.downcast_ref::<ShuffleWriterExec>().is_some()
        || plan.downcast_ref::<ShuffleReaderExec>().is_some()
        || plan.downcast_ref::<TaskJoinExec>().is_some()
        || plan.downcast_ref::<MarkCombineExec>().is_some()
        || plan.downcast_ref::<SingleTaskExec>().is_some()
        || plan.downcast_ref::<RecursiveQueryExec>().is_some()
        || plan.downcast_ref::<WorkTableRef>().is_some()
        || plan.downcast_ref::<PartialSortExec>().is_some()
        || plan.downcast_ref::<FormatScanExec>().is_some()
        || plan.downcast_ref::<TableWriterExec>().is_some()
}

/// The inputs an extension node travels with: its children — but a recursive query's
/// recursive term with its work table readers as [`WorkTableRef`]s.
pub fn extension_inputs(plan: &Arc<dyn ExecutionPlan>) -> DfResult<Vec<Arc<dyn ExecutionPlan>>> {
    if let Some(recursive) = plan.downcast_ref::<RecursiveQueryExec>() {
        return Ok(vec![
            recursive.static_term().clone(),
            crate::plan::single_task::with_work_table_refs(recursive)?,
        ]);
    }
    Ok(plan.children().into_iter().cloned().collect())
}

/// Extension codec for lambdafusion's execution nodes.
#[derive(Debug, Default, Clone, Copy)]
pub struct LambdaFusionCodec;

fn codec_err(msg: impl Into<String>) -> DataFusionError {
    DataFusionError::Internal(format!("lambdafusion codec: {}", msg.into()))
}

impl PhysicalExtensionCodec for LambdaFusionCodec {
    /// One arm per node of ours, each a few lines; kept in one match (and its twin
    /// [`Self::try_encode`]) so the wire format of every node reads in one place.
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let node = LambdaFusionNode::decode(buf).map_err(|e| codec_err(e.to_string()))?;
        let decode_ctx = PhysicalPlanDecodeContext::new(ctx, self);
        if let Some(window) = &node.window {
            return crate::plan::encoding::decode_window(window, &decode_ctx, proto_converter);
        }
        if let Some(single) = &node.single_task {
            let proto = protobuf::PhysicalPlanNode::decode(single.plan.as_slice())
                .map_err(|e| codec_err(format!("single-task plan: {e}")))?;
            let inner = proto_converter.proto_to_execution_plan(&proto, &decode_ctx)?;
            return Ok(Arc::new(SingleTaskExec::new(inner)));
        }
        if let Some(r) = &node.recursive_query {
            let [static_term, recursive_term] = inputs else {
                return Err(codec_err(format!(
                    "a recursive query needs two inputs, got {}",
                    inputs.len()
                )));
            };
            let schema = r
                .schema
                .as_ref()
                .ok_or_else(|| codec_err("recursive query without schema"))?;
            return Ok(Arc::new(RecursiveQueryExec::try_new(
                r.name.clone(),
                Arc::new(Schema::try_from(schema)?),
                static_term.clone(),
                recursive_term.clone(),
                r.is_distinct,
            )?));
        }
        if let Some(d) = &node.format_scan {
            let proto = protobuf::PhysicalPlanNode::decode(d.scan.as_slice())
                .map_err(|e| codec_err(format!("table format scan: {e}")))?;
            let scan = proto_converter.proto_to_execution_plan(&proto, &decode_ctx)?;
            return Ok(Arc::new(FormatScanExec::from_json(
                scan,
                &d.root,
                &d.deletions,
                &d.field_ids,
                d.has_output
                    .then(|| d.output.iter().map(|&c| c as usize).collect()),
            )?));
        }
        if let Some(w) = &node.table_writer {
            let [input] = inputs else {
                return Err(codec_err(format!(
                    "a table writer needs one input, got {}",
                    inputs.len()
                )));
            };
            let target: crate::write::WriteTarget = serde_json::from_str(&w.target)
                .map_err(|e| codec_err(format!("table writer target: {e}")))?;
            return Ok(Arc::new(TableWriterExec::new(
                input.clone(),
                Arc::new(target),
            )));
        }
        if let Some(p) = &node.partial_sort {
            let [input] = inputs else {
                return Err(codec_err(format!(
                    "a partial sort needs one input, got {}",
                    inputs.len()
                )));
            };
            let expr = parse_physical_sort_exprs(
                &p.expr,
                &decode_ctx,
                input.schema().as_ref(),
                proto_converter,
            )?;
            let expr = datafusion::physical_expr::LexOrdering::new(expr)
                .ok_or_else(|| codec_err("a partial sort without sort keys"))?;
            return Ok(Arc::new(
                PartialSortExec::new(expr, input.clone(), p.common_prefix_length as usize)
                    .with_fetch(p.fetch.map(|f| f as usize))
                    .with_preserve_partitioning(p.preserve_partitioning),
            ));
        }
        if let Some(w) = &node.work_table {
            let schema = w
                .schema
                .as_ref()
                .ok_or_else(|| codec_err("work table without schema"))?;
            let projection = w
                .projected
                .then(|| w.projection.iter().map(|&i| i as usize).collect());
            return Ok(Arc::new(
                datafusion::physical_plan::work_table::WorkTableExec::new(
                    w.name.clone(),
                    Arc::new(Schema::try_from(schema)?),
                    projection,
                )?,
            ));
        }
        if let Some(sets) = &node.empty_grouping_sets {
            return crate::plan::encoding::decode_empty_grouping_sets(
                sets,
                &decode_ctx,
                proto_converter,
            );
        }
        if node.task_join.is_some() {
            let [join] = inputs else {
                return Err(codec_err(format!(
                    "task join needs one input, got {}",
                    inputs.len()
                )));
            };
            return Ok(Arc::new(TaskJoinExec::try_new(join.clone())?));
        }
        if let Some(m) = node.mark_combine {
            let [rows, marks] = inputs else {
                return Err(codec_err(format!(
                    "mark combine needs two inputs, got {}",
                    inputs.len()
                )));
            };
            let join_type = *MARK_JOIN_TYPES
                .get(m.join_type as usize)
                .ok_or_else(|| codec_err(format!("unknown mark join type {}", m.join_type)))?;
            let projection = m
                .projected
                .then(|| m.projection.iter().map(|&i| i as usize).collect());
            return Ok(Arc::new(MarkCombineExec::try_new(
                join_type,
                projection,
                m.fetch.map(|f| f as usize),
                rows.clone(),
                marks.clone(),
            )?));
        }
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
                let constants = r
                    .constants
                    .iter()
                    .map(|c| {
                        let value = c
                            .value
                            .as_ref()
                            .map(datafusion::common::ScalarValue::try_from)
                            .transpose()
                            .map_err(|e| codec_err(format!("constant value: {e}")))?;
                        Ok((c.index as usize, value))
                    })
                    .collect::<DfResult<Vec<_>>>()?;
                let eq = (!constants.is_empty())
                    .then(|| ShuffleReaderExec::constants_of(&schema, constants));
                Ok(Arc::new(ShuffleReaderExec::new(
                    r.stage,
                    r.producers as usize,
                    mode,
                    schema,
                    eq,
                )))
            }
            _ => Err(codec_err(
                "extension node is neither a shuffle writer nor a reader",
            )),
        }
    }

    /// One arm per node of ours, mirroring [`Self::try_decode`] (long for that reason).
    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        let message = if let Some(w) = node.downcast_ref::<TableWriterExec>() {
            LambdaFusionNode {
                table_writer: Some(TableWriterNode {
                    target: serde_json::to_string(w.target().as_ref())
                        .map_err(|e| codec_err(format!("table writer target: {e}")))?,
                }),
                ..Default::default()
            }
        } else if let Some(single) = node.downcast_ref::<SingleTaskExec>() {
            LambdaFusionNode {
                single_task: Some(SingleTaskNode {
                    plan: proto_converter
                        .execution_plan_to_proto(single.inner(), self)?
                        .encode_to_vec(),
                }),
                ..Default::default()
            }
        } else if let Some(r) = node.downcast_ref::<RecursiveQueryExec>() {
            LambdaFusionNode {
                recursive_query: Some(RecursiveQueryNode {
                    name: r.name().to_string(),
                    is_distinct: r.is_distinct(),
                    schema: Some(protobuf::Schema::try_from(r.schema().as_ref())?),
                }),
                ..Default::default()
            }
        } else if let Some(d) = node.downcast_ref::<FormatScanExec>() {
            LambdaFusionNode {
                format_scan: Some(FormatScanNode {
                    root: d.root().to_string(),
                    deletions: d.deletions_json()?,
                    scan: proto_converter
                        .execution_plan_to_proto(d.scan(), self)?
                        .encode_to_vec(),
                    field_ids: d.field_ids_json()?,
                    has_output: d.output().is_some(),
                    output: d
                        .output()
                        .unwrap_or_default()
                        .iter()
                        .map(|&c| c as u32)
                        .collect(),
                }),
                ..Default::default()
            }
        } else if let Some(p) = node.downcast_ref::<PartialSortExec>() {
            LambdaFusionNode {
                partial_sort: Some(PartialSortNode {
                    expr: serialize_physical_sort_exprs(
                        p.expr().iter().cloned(),
                        self,
                        proto_converter,
                    )?,
                    common_prefix_length: p.common_prefix_length() as u64,
                    fetch: p.fetch().map(|f| f as u64),
                    preserve_partitioning: p.preserve_partitioning(),
                }),
                ..Default::default()
            }
        } else if let Some(w) = node.downcast_ref::<WorkTableRef>() {
            LambdaFusionNode {
                work_table: Some(WorkTableNode {
                    name: w.name.clone(),
                    schema: Some(protobuf::Schema::try_from(w.table_schema.as_ref())?),
                    projection: w.projection.iter().flatten().map(|&i| i as u32).collect(),
                    projected: w.projection.is_some(),
                }),
                ..Default::default()
            }
        } else if let Some(w) = node.downcast_ref::<ShuffleWriterExec>() {
            LambdaFusionNode {
                writer: Some(ShuffleWriterNode {
                    stage: w.stage(),
                    partitioning: w
                        .partitioning()
                        .map(|p| serialize_partitioning(p, self, proto_converter))
                        .transpose()?,
                }),
                ..Default::default()
            }
        } else if node.downcast_ref::<TaskJoinExec>().is_some() {
            LambdaFusionNode {
                task_join: Some(TaskJoinNode {}),
                ..Default::default()
            }
        } else if let Some(m) = node.downcast_ref::<MarkCombineExec>() {
            let join_type = MARK_JOIN_TYPES
                .iter()
                .position(|t| *t == m.join_type())
                .ok_or_else(|| codec_err(format!("mark combine for a {} join", m.join_type())))?;
            LambdaFusionNode {
                mark_combine: Some(MarkCombineNode {
                    join_type: join_type as u32,
                    projection: m
                        .projection()
                        .unwrap_or_default()
                        .iter()
                        .map(|&i| i as u32)
                        .collect(),
                    projected: m.projection().is_some(),
                    fetch: m.fetch().map(|f| f as u64),
                }),
                ..Default::default()
            }
        } else if let Some(r) = node.downcast_ref::<ShuffleReaderExec>() {
            let (mode, partitioning) = match r.mode() {
                ReadMode::Hash(p) => (0, Some(serialize_partitioning(p, self, proto_converter)?)),
                ReadMode::Gather => (1, None),
                ReadMode::All => (2, None),
            };
            LambdaFusionNode {
                reader: Some(ShuffleReaderNode {
                    stage: r.stage(),
                    producers: r.producers() as u32,
                    mode,
                    schema: Some(protobuf::Schema::try_from(r.schema().as_ref())?),
                    partitioning,
                    constants: r
                        .constant_columns()
                        .into_iter()
                        .map(|(index, value)| {
                            Ok(ConstantColumn {
                                index: index as u32,
                                value: value
                                    .as_ref()
                                    .map(datafusion_proto::protobuf::ScalarValue::try_from)
                                    .transpose()
                                    .map_err(|e| codec_err(format!("constant value: {e}")))?,
                            })
                        })
                        .collect::<DfResult<Vec<_>>>()?,
                }),
                ..Default::default()
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

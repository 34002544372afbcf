//! Submission ([`Scheduler::submit`]): plan the SQL under its limits, answer statements
//! at once, record a query's job, stages and plans, and dispatch its first stages.

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::logical_expr::LogicalPlan;
use futures::StreamExt;
use object_store::ObjectStoreExt;
use tracing::{info, Instrument};

use crate::access::Caller;
use crate::faults::{job_key, FaultKind};
use crate::plan::{self, StageGraph, StageSplitter};
use crate::requests::Tally;
use crate::shuffle::stage_plan_path;
use crate::sql::Verdict;
use crate::state::{JobKind, JobRecord, JobState, NewJob, PlanRecord, StageRecord, StageState};
use crate::time::now_ms;
use crate::{Error, Result};

use super::*;

/// What planning made of a statement ([`Scheduler::submit`]).
enum Planned {
    /// A query's stages and their encoded plans, to record and start.
    Query {
        graph: StageGraph,
        plans: Vec<Vec<u8>>,
        kind: Kind,
    },
    /// A statement the scheduler answered: its rows, to record as a finished job.
    Rows(SchemaRef, Vec<datafusion::arrow::array::RecordBatch>),
    /// Catalog DDL, to run against the store.
    Catalog(Box<datafusion::execution::SessionState>, LogicalPlan),
}

/// What job a planned query makes: its kind, its result's schema where it is not the
/// final stage's (`EXPLAIN ANALYZE`, a write), and what it writes.
type Kind = (
    JobKind,
    Option<SchemaRef>,
    Option<crate::write::WriteTarget>,
);

/// The most a job record may take: a DynamoDB item holds at most 400 KB, names included.
const JOB_ITEM_LIMIT: usize = 390 * 1024;

/// What a job record takes besides its SQL and result schema (ids, states, times).
const JOB_ITEM_OVERHEAD: usize = 2 * 1024;

impl Scheduler {
    /// Plans `sql` and starts it. Statements (DDL, `SHOW TABLES`, `EXPLAIN`, ...) are
    /// answered here and finish before this returns; queries are cut into stages,
    /// recorded and their first stages dispatched.
    pub async fn submit(&self, sql: &str, options: &SubmitOptions) -> Result<Submitted> {
        let sql = sql.trim();
        if sql.is_empty() {
            return Err(Error::InvalidInput("empty SQL statement".into()));
        }
        if sql.len() > self.config().max_sql_bytes {
            return Err(Error::TooLarge(format!(
                "the SQL text is {} bytes; at most {} are accepted (a job record must fit \
                 in one store item)",
                sql.len(),
                self.config().max_sql_bytes
            )));
        }
        let time_limit = self.time_limit(options.max_seconds)?;
        if let Some(retry_after) = self.services.invoker.saturated() {
            return Err(Error::Overloaded {
                message: "too many tasks are waiting for a function slot; try again shortly".into(),
                retry_after,
            });
        }
        crate::sql::check_text(sql, self.config())?;
        self.check_caller_queries(&options.caller).await?;
        let submitted_ms = now_ms();
        let job_id = uuid::Uuid::new_v4().simple().to_string();
        let span = tracing::info_span!("submit", job_id = %job_id);
        // Planning's requests (the catalog, table files, large plans) are counted and
        // recorded on the job.
        let tally = Tally::new();
        let counted = Scheduler::new(self.services.counted(&tally, None)?);
        // Planning runs on a thread of its own (a deep statement cannot exhaust this
        // thread's stack) within a time budget; nothing is recorded until it is done.
        let (budget, setting) = if time_limit < self.config().max_planning_time {
            (time_limit, "the query's time limit, max_seconds")
        } else {
            (self.config().max_planning_time, "max_planning_seconds")
        };
        let planner = counted.clone();
        let (text, planning_span) = (sql.to_string(), span.clone());
        let deadline = tokio::time::Instant::now() + budget;
        let (planning_id, caller) = (job_id.clone(), options.caller.clone());
        let planned = crate::sql::off_thread(budget, setting, move || {
            let (job_id, caller) = (planning_id, caller);
            async move {
                planner
                    .plan(&text, deadline, &job_id, &caller)
                    .await
                    .map_err(Error::planning)
            }
            .instrument(planning_span)
        })
        .await?;
        async {
            match planned {
                Planned::Query { graph, plans, kind } => {
                    counted
                        .start_query(
                            &job_id,
                            sql,
                            graph,
                            plans,
                            options,
                            (submitted_ms, time_limit),
                            kind,
                            &tally,
                        )
                        .await
                }
                Planned::Rows(schema, batches) => {
                    statements::record_result(
                        &self.services,
                        &job_id,
                        sql,
                        &options.caller,
                        schema,
                        &batches,
                    )
                    .await
                }
                Planned::Catalog(state, logical) => {
                    statements::catalog(&self.services, &state, &job_id, sql, &logical, options)
                        .await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Parses, checks and plans `sql` (see [`crate::sql`]): a query as far as its
    /// encoded stages, a statement the scheduler answers as its rows (explains and
    /// catalog reads, bounded by `deadline`), catalog DDL as its plan. Runs on a planning
    /// thread.
    async fn plan(
        &self,
        sql: &str,
        deadline: tokio::time::Instant,
        job_id: &str,
        caller: &Caller,
    ) -> Result<Planned> {
        let mut state = self.services.session_state(self.config().stage_width());
        // The statement's start time: what now(), current_date() and their kin fold to
        // while planning (unset, they stay functions that cannot run in a task).
        state.mark_start_execution();
        crate::catalog::install(&state, &self.services, crate::catalog::lists_tables(sql)).await?;
        let mut statement = crate::time_travel::parse(
            sql,
            state.config().options().sql_parser.recursion_limit.get(),
        )?;
        crate::sql::measure(&statement, self.config())?;
        // `CREATE TABLE ... WITH (...) AS`: options DataFusion would refuse, kept here.
        let table_options = crate::write::take_table_options(&mut statement)?;
        let logical = state
            .statement_to_plan(statement)
            .await
            .map_err(|e| Error::InvalidInput(e.strip_backtrace().to_string()))?;
        match crate::sql::verdict(&logical)? {
            Verdict::Query(query) => {
                self.plan_query(&state, query, (JobKind::Query, None, None))
                    .await
            }
            Verdict::Write(copy) => {
                self.config().access.check_catalog_writer(caller)?;
                let target = crate::write::WriteTarget::from_copy(copy, job_id)?;
                crate::write::check_target(&self.services, &target).await?;
                let schema = crate::write::summary_schema();
                self.plan_query(
                    &state,
                    &copy.input,
                    (JobKind::Write, Some(schema), Some(target)),
                )
                .await
            }
            // EXPLAIN ANALYZE runs its query like any other, its tasks recording metrics.
            Verdict::Analyze(query) => {
                let schema = Arc::new(logical.schema().as_arrow().clone());
                self.plan_query(&state, query, (JobKind::Analyze, Some(schema), None))
                    .await
            }
            Verdict::Explain(query) => {
                let (schema, rows) =
                    statements::explain(&self.services, &state, query, None).await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::CreateTableAs(create) => {
                let Some(options) = &table_options else {
                    return Err(Error::InvalidInput(
                        "CREATE TABLE without AS: a table is created over files (CREATE \
                         EXTERNAL TABLE ... LOCATION '...') or from a query (CREATE TABLE ... \
                         AS SELECT ...)"
                            .into(),
                    ));
                };
                let access = &self.config().access;
                access.check_catalog_writer(caller)?;
                let name = crate::catalog::table_name(&create.name)?;
                if create.or_replace {
                    return Err(Error::InvalidInput(format!(
                        "CREATE OR REPLACE TABLE ... AS is not supported: DROP TABLE {name} \
                         first (its files stay where they are)"
                    )));
                }
                if create.temporary {
                    return Err(Error::InvalidInput(
                        "temporary tables are not supported".into(),
                    ));
                }
                if let Some(existing) = self.services.store.get_table(&name).await? {
                    let kind = if existing.format == crate::catalog::VIEW_FORMAT {
                        "a view"
                    } else {
                        "a table"
                    };
                    if create.if_not_exists {
                        let rows = statements::message_batch(&format!(
                            "{name} already exists ({kind}); nothing written"
                        ))?;
                        return Ok(Planned::Rows(rows[0].schema(), rows));
                    }
                    return Err(Error::InvalidInput(format!(
                        "{name} already exists ({kind}): choose another name, or DROP it first"
                    )));
                }
                let format = options.format.as_deref().unwrap_or_default();
                let input = create.input.as_ref().clone();
                // A table format's own types in the files (microsecond timestamps, ...).
                let input = if format.eq_ignore_ascii_case(crate::delta::FORMAT) {
                    crate::write::delta::cast_input(input)?
                } else if format.eq_ignore_ascii_case(crate::iceberg::FORMAT) {
                    crate::write::cast_columns(input, crate::write::iceberg::iceberg_arrow_type)?
                } else {
                    input
                };
                let target = crate::write::WriteTarget::for_table(
                    &name,
                    input.schema(),
                    options,
                    access,
                    job_id,
                )?;
                crate::write::check_target(&self.services, &target).await?;
                let schema = crate::write::summary_schema();
                self.plan_query(&state, &input, (JobKind::Write, Some(schema), Some(target)))
                    .await
            }
            Verdict::Insert(insert) => {
                self.config().access.check_catalog_writer(caller)?;
                let target = self.insert_target(insert, job_id).await?;
                crate::write::check_target(&self.services, &target).await?;
                let schema = crate::write::summary_schema();
                self.plan_query(
                    &state,
                    &insert.input,
                    (JobKind::Write, Some(schema), Some(target)),
                )
                .await
            }
            Verdict::ExplainInsert(insert) => {
                let target = self.insert_target(insert, job_id).await?;
                let (schema, rows) =
                    statements::explain(&self.services, &state, &insert.input, Some(target))
                        .await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::ExplainWrite(copy) => {
                let target = crate::write::WriteTarget::from_copy(copy, job_id)?;
                let (schema, rows) =
                    statements::explain(&self.services, &state, &copy.input, Some(target)).await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::Metadata => {
                let (schema, rows) =
                    statements::metadata(&self.services, &state, &logical, deadline).await?;
                Ok(Planned::Rows(schema, rows))
            }
            Verdict::Catalog => Ok(Planned::Catalog(Box::new(state), logical)),
        }
    }

    /// The target of `INSERT INTO`: an append to a Delta table of the catalog. Other
    /// tables are refused, naming why: their readers list their directories, so an
    /// append to them could not be seen all at once.
    async fn insert_target(
        &self,
        insert: &datafusion::logical_expr::dml::DmlStatement,
        job_id: &str,
    ) -> Result<crate::write::WriteTarget> {
        let name = crate::catalog::table_name(&insert.table_name)?;
        let record = self.services.store.get_table(&name).await?;
        let format = record.as_ref().map(|r| r.format.as_str());
        if format == Some(crate::iceberg::FORMAT) {
            let location = record
                .as_ref()
                .and_then(|r| r.locations.first())
                .cloned()
                .unwrap_or_default();
            if location.ends_with(".metadata.json") {
                return Err(Error::InvalidInput(format!(
                    "INSERT INTO {name}: the table is registered at one metadata file \
                     ({location}), a fixed version of it: register its directory to append \
                     to it"
                )));
            }
            let (columns, partition_by) =
                crate::write::iceberg::append_layout(&self.services, &name, &location).await?;
            return crate::write::WriteTarget::for_iceberg_insert(
                &name,
                &location,
                partition_by,
                &columns,
                job_id,
            );
        }
        if format != Some(crate::delta::FORMAT) {
            let what = match format {
                Some(crate::catalog::VIEW_FORMAT) => "a view".to_string(),
                Some(f) => format!("a {f} table"),
                None => "not a table of the catalog".to_string(),
            };
            return Err(Error::InvalidInput(format!(
                "INSERT INTO {name} is not supported: {name} is {what}, and INSERT INTO \
                 appends to Delta and Iceberg tables only (readers of plain files list their \
                 directory, so an append could not appear all at once). Write a Delta or an \
                 Iceberg table (CREATE TABLE ... WITH (format = 'DELTA') AS SELECT ...) or a \
                 new location (COPY (SELECT ...) TO '...')"
            )));
        }
        let provider = datafusion::datasource::source_as_provider(&insert.target)?;
        let Some(table) = provider.downcast_ref::<crate::delta::DeltaTable>() else {
            return Err(Error::Internal(format!(
                "Delta table {name} was not opened as one"
            )));
        };
        if table.maps_columns() {
            return Err(Error::InvalidInput(format!(
                "INSERT INTO {name}: the table uses column mapping (its files name columns \
                 otherwise), which lambdafusion does not write yet"
            )));
        }
        crate::write::WriteTarget::for_insert(
            &name,
            table.root().as_str(),
            table.partition_columns(),
            insert.input.schema(),
            job_id,
        )
    }

    /// Plans a query's stages and encodes their plans, within the per-query caps.
    async fn plan_query(
        &self,
        state: &datafusion::execution::SessionState,
        logical: &LogicalPlan,
        kind: Kind,
    ) -> Result<Planned> {
        let mut physical = plan::physical_plan(state, logical, self.config())
            .await
            .map_err(user_planning_error)?;
        if let Some(target) = &kind.2 {
            // The query's final stage writes its rows: every task its own files.
            physical = crate::write::sink::writer_over(physical, Arc::new(target.clone()))?;
        }
        self.check_scan_limit(plan::scan_bytes(&physical))?;
        let graph = StageSplitter::split(physical, self.config()).map_err(user_planning_error)?;
        self.check_caps(&graph)?;
        let plans = graph
            .stages
            .iter()
            .map(|s| plan::encode_plan(s.plan.clone()).map_err(user_planning_error))
            .collect::<Result<Vec<_>>>()?;
        Ok(Planned::Query { graph, plans, kind })
    }

    /// Refuses (429) a query from a caller who has `max_queries_per_caller` queries
    /// running, among their newest [`HISTORY_SCAN`](crate::config::HISTORY_SCAN).
    async fn check_caller_queries(&self, caller: &crate::access::Caller) -> Result<()> {
        let Some(cap) = self.config().max_queries_per_caller else {
            return Ok(());
        };
        let running = self.running_jobs(caller, Some(cap)).await?;
        if running.len() >= cap {
            return Err(Error::Overloaded {
                message: format!(
                    "{} of your queries are running ({}); this deployment runs at most \
                     {cap} per caller at once (max_queries_per_caller): wait for one to \
                     end, or cancel one",
                    running.len(),
                    running.join(", ")
                ),
                retry_after: std::time::Duration::from_secs(5),
            });
        }
        Ok(())
    }

    /// Refuses (429) a query reserving `limit` tasks when the caller's running queries
    /// already reserve more of `max_tasks_per_caller` than leaves room for it.
    async fn check_caller_tasks(&self, caller: &crate::access::Caller, limit: u32) -> Result<()> {
        let Some(cap) = self.config().max_tasks_per_caller else {
            return Ok(());
        };
        let running = self.running_jobs(caller, None).await?;
        // Alone, a query runs whatever its width (a UNION's stage may pass the cap).
        if running.is_empty() {
            return Ok(());
        }
        let store = &self.services.store;
        let mut reserved = 0u64;
        for id in &running {
            // A job without a reservation (started before the cap) may use a whole stage.
            reserved += store
                .get_job(id)
                .await?
                .filter(|j| j.state == JobState::Running)
                .map_or(0, |j| {
                    j.task_limit
                        .map_or(self.config().stage_width() as u64, u64::from)
                });
        }
        if reserved + u64::from(limit) > cap as u64 {
            return Err(Error::Overloaded {
                message: format!(
                    "this query runs up to {limit} tasks at once and your running queries \
                     ({}) hold {reserved} of the {cap} tasks a caller may have in flight \
                     (max_tasks_per_caller): wait for one to end, or cancel one",
                    running.join(", ")
                ),
                retry_after: std::time::Duration::from_secs(5),
            });
        }
        Ok(())
    }

    /// The caller's running queries among their newest
    /// [`HISTORY_SCAN`](crate::config::HISTORY_SCAN), newest first; at most `enough`.
    async fn running_jobs(
        &self,
        caller: &crate::access::Caller,
        enough: Option<usize>,
    ) -> Result<Vec<String>> {
        let store = &self.services.store;
        let recent = store
            .job_history(caller.principal(), None, crate::config::HISTORY_SCAN)
            .await?;
        // Their states, read a few at a time (submission waits on them), newest first.
        let ids: Vec<String> = recent
            .iter()
            .filter_map(|sk| crate::state::job_of_history_sk(sk).map(str::to_string))
            .collect();
        let mut states = futures::stream::iter(ids)
            .map(|id| {
                let store = store.clone();
                async move {
                    let state = store.job_state(&id).await;
                    (id, state)
                }
            })
            .buffered(16);
        let mut running = Vec::new();
        while let Some((id, state)) = states.next().await {
            if state? == Some(JobState::Running) {
                running.push(id);
                if enough.is_some_and(|n| running.len() >= n) {
                    break;
                }
            }
        }
        Ok(running)
    }

    /// Refuses a query that would read more bytes of table files than
    /// `max_scan_bytes_per_query` allows.
    fn check_scan_limit(&self, scan_bytes: u64) -> Result<()> {
        match self.config().max_scan_bytes_per_query {
            Some(limit) if scan_bytes > limit as u64 => Err(Error::InvalidInput(format!(
                "the query would read {} of table files, more than this deployment allows \
                 one query (max_scan_bytes_per_query: {}): filter on partition columns, \
                 select fewer columns of columnar files, or ask an administrator to raise \
                 the limit",
                crate::plan::adaptive::human_bytes(scan_bytes),
                crate::plan::adaptive::human_bytes(limit as u64)
            ))),
            _ => Ok(()),
        }
    }

    /// Refuses a query with more stages or tasks than one query may have.
    fn check_caps(&self, graph: &StageGraph) -> Result<()> {
        let config = self.config();
        let stages = graph.stages.len();
        if stages > config.max_stages_per_query {
            return Err(Error::InvalidInput(format!(
                "the query needs {stages} stages; one query may have at most {} \
                 (max_stages_per_query): fewer UNION branches or joins per statement",
                config.max_stages_per_query
            )));
        }
        let tasks: usize = graph.stages.iter().map(|s| s.tasks).sum();
        if tasks > config.max_tasks_per_query {
            return Err(Error::InvalidInput(format!(
                "the query is planned as {tasks} tasks; one query may have at most {} \
                 (max_tasks_per_query): read less data per statement",
                config.max_tasks_per_query
            )));
        }
        Ok(())
    }

    /// The time limit of a query: the request's (if any) within the deployment's.
    fn time_limit(&self, asked: Option<f64>) -> Result<std::time::Duration> {
        let max = self.config().max_query_time;
        match asked {
            None => Ok(max),
            Some(s) if s.is_finite() && s > 0.0 && s <= max.as_secs_f64() => {
                Ok(std::time::Duration::from_secs_f64(s))
            }
            Some(s) => Err(Error::InvalidInput(format!(
                "max_seconds must be a number of seconds above 0 and at most {} (this \
                 deployment's max_query_seconds), not {s}",
                max.as_secs()
            ))),
        }
    }

    /// Records and starts a planned query; `kind` says whether it is a plain query or an
    /// `EXPLAIN ANALYZE` (with the schema of its rendered result).
    #[allow(clippy::too_many_arguments)]
    async fn start_query(
        &self,
        job_id: &str,
        sql: &str,
        graph: StageGraph,
        plans: Vec<Vec<u8>>,
        options: &SubmitOptions,
        limits: (u64, std::time::Duration),
        kind: Kind,
        tally: &Tally,
    ) -> Result<Submitted> {
        let mut new = self
            .records(job_id, sql, &graph, plans, &options.caller, limits, kind)
            .await?;
        new.job.requests = tally.counts();
        if let Some(limit) = new.job.task_limit {
            self.check_caller_tasks(&options.caller, limit).await?;
        }
        self.services
            .faults
            .crash_point(FaultKind::SchedulerCrashMidSubmit, &job_key(sql))?;
        self.services.store.create_job(&new).await?;
        info!(job_id = %job_id, stages = new.stages.len(), "job submitted");
        self.advance(job_id).await?;
        let state = self
            .services
            .store
            .get_job(job_id)
            .await?
            .map_or(JobState::Running, |j| j.state);
        Ok(Submitted {
            job_id: job_id.to_string(),
            state,
        })
    }

    /// The records of a new job; stage plans too large for an item go to object storage.
    #[allow(clippy::too_many_arguments)]
    async fn records(
        &self,
        job_id: &str,
        sql: &str,
        graph: &StageGraph,
        encoded: Vec<Vec<u8>>,
        caller: &Caller,
        (created_ms, time_limit): (u64, std::time::Duration),
        (kind, result_schema, write): Kind,
    ) -> Result<NewJob> {
        let expires_at = self.services.expires_at();
        // The job item holds the SQL and the result schema (base64): refuse what cannot
        // fit in one store item before anything is written.
        let schema = result_schema.unwrap_or_else(|| graph.final_stage().plan.schema());
        let result_schema = plan::encode_schema(&schema)?;
        let item_bytes = sql.len() + result_schema.len().div_ceil(3) * 4 + JOB_ITEM_OVERHEAD;
        if item_bytes > JOB_ITEM_LIMIT {
            return Err(Error::TooLarge(format!(
                "the query's SQL text ({} bytes) and result schema ({} columns, {} bytes \
                 encoded) do not fit in one job record (at most {} KiB): select fewer or \
                 shorter-named columns",
                sql.len(),
                schema.fields().len(),
                result_schema.len(),
                JOB_ITEM_LIMIT / 1024
            )));
        }
        let mut stages = Vec::with_capacity(graph.stages.len());
        let mut plans = Vec::with_capacity(graph.stages.len());
        for (s, bytes) in graph.stages.iter().zip(encoded) {
            let (inline, object) = if bytes.len() <= self.config().inline_plan_limit {
                (Some(bytes), None)
            } else {
                let path = stage_plan_path(&self.services.shuffle.prefix, job_id, s.id);
                self.services
                    .shuffle_store()?
                    .put(&path, bytes.into())
                    .await?;
                (None, Some(path.to_string()))
            };
            plans.push(PlanRecord {
                job_id: job_id.to_string(),
                stage: s.id,
                plan: inline,
                object,
                expires_at,
            });
            stages.push(StageRecord {
                job_id: job_id.to_string(),
                stage: s.id,
                state: StageState::Pending,
                tasks: s.tasks as u32,
                output_partitions: s.output_partitions as u32,
                inputs: s.inputs.clone(),
                summary: s.summary.clone(),
                scan_bytes: s.scan_bytes.clone(),
                switch: s.switch,
                combines: s.combines,
                dispatched_ms: None,
                confirmed_ms: None,
                decision: None,
                expires_at,
            });
        }
        let job = JobRecord {
            job_id: job_id.to_string(),
            sql: sql.to_string(),
            kind,
            state: JobState::Running,
            stage_count: stages.len() as u32,
            result_schema,
            owner: caller.principal().to_string(),
            created_ms,
            deadline_ms: Some(created_ms + time_limit.as_millis() as u64),
            finished_ms: None,
            error: None,
            requests: Default::default(),
            task_limit: task_limit(graph, self.config()),
            write,
            expires_at,
        };
        Ok(NewJob {
            job,
            stages,
            plans,
            tasks: vec![],
        })
    }
}

/// The tasks a query of `graph` reserves out of its caller's `max_tasks_per_caller`: its
/// widest stage. Stages are planned no wider than the cap, except a `UNION`'s, which runs
/// its branches' tasks together.
fn task_limit(graph: &StageGraph, config: &crate::config::EngineConfig) -> Option<u32> {
    config.max_tasks_per_caller?;
    let widest = graph.stages.iter().map(|s| s.tasks).max().unwrap_or(1);
    Some(widest.max(1) as u32)
}

/// Planning failures that are the query's fault become 400s with DataFusion's message.
fn user_planning_error(e: Error) -> Error {
    e.planning()
}

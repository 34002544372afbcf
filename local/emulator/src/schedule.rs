//! Scheduled EventBridge rules with a Lambda target: what invokes the scheduler's sweep.
//!
//! The deployment has a scheduled rule (`aws_cloudwatch_event_rule.sweep`, `rate(1 minute)`)
//! whose target is the scheduler function. Each schedule of the config (`schedules`, see
//! [`crate::config::ScheduleConfig`]) plays one such rule and target: every period it
//! sends the event EventBridge sends for a scheduled rule
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-run-lambda-schedule.html>):
//!
//! ```json
//! {"version": "0", "id": "<uuid>", "detail-type": "Scheduled Event", "source": "aws.events",
//!  "account": "000000000000", "time": "2015-10-08T16:53:06Z", "region": "us-east-1",
//!  "resources": ["arn:aws:events:us-east-1:000000000000:rule/<name>"], "detail": {}}
//! ```
//!
//! to its function as an asynchronous (`Event`) invocation, the way EventBridge invokes
//! Lambda targets (<https://docs.aws.amazon.com/lambda/latest/dg/invocation-async.html>),
//! through the same [`Registry`] path as the Invoke API: the `lambda.throttle_invoke`
//! fault can refuse it (429), and once accepted it is an event like any other, with the
//! function's retries, event age and on-failure destination and the `lambda.*` event
//! faults (drop, delay, duplicate, cold start).
//!
//! # Period
//!
//! `expression` is EventBridge's `rate(value unit)`: `value` a positive whole number, `unit`
//! `minute`, `hour` or `day` when `value` is 1 and `minutes`, `hours`, `days` otherwise
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rate-expressions.html>);
//! anything else is refused. A rate schedule starts when the rule is created, so the first
//! event comes one period after the emulator starts, then one every period. `every_secs`
//! replaces the period locally (tests and the local stack need seconds, not minutes).
//! `cron(...)` expressions (six fields,
//! <https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-scheduled-rule-pattern.html>)
//! are not emulated: one is accepted only together with `every_secs`, which then is the
//! whole schedule.
//!
//! # Delivery retries (the target's retry policy)
//!
//! When the invocation is refused (only `lambda.throttle_invoke` refuses an event
//! locally), EventBridge retries it, up to `max_retry_attempts` times (0..=185, default
//! 185) while the event is younger than `max_event_age_secs` (60..=86400, default 86400),
//! then drops it
//! (<https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-retry-policy.html>,
//! <https://docs.aws.amazon.com/eventbridge/latest/APIReference/API_RetryPolicy.html>).
//! AWS backs off exponentially with jitter without publishing the delays; here they
//! double from 1 s up to 8 minutes (so the default 185 retries span about 24 hours, as
//! the default policy's 24 hours), or from 100 ms up to 1 s with `"timing": "fast"`, and
//! have no jitter. A retried event is the same event (same `id` and `time`); its
//! fault-decision key is drawn afresh like any repeated payload
//! ([`crate::injection`]). A dropped event is logged; there is no dead-letter queue.
//!
//! Nothing is made up: a period that passed while the emulator was busy is skipped, and
//! a schedule never waits for the previous event to finish (as EventBridge does not).

use bytes::Bytes;
use lambdafusion_faults::FaultKind;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{ScheduleConfig, Timing};
use crate::function::{Registry, Target};
use crate::{time, Error};

/// A parsed schedule expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expression {
    /// `rate(value unit)`: one event per period.
    Rate(Duration),
    /// `cron(fields)`: the six fields as written (not evaluated locally).
    Cron(String),
}

/// Parses an EventBridge schedule expression: `rate(value unit)` fully (see the module
/// documentation), `cron(...)` only as far as "six fields between the parentheses".
pub fn parse_expression(text: &str) -> Result<Expression, String> {
    if let Some(inner) = text
        .strip_prefix("rate(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        return parse_rate(inner)
            .map(Expression::Rate)
            .map_err(|why| format!("{text:?} is not a valid rate expression: {why}"));
    }
    if let Some(inner) = text
        .strip_prefix("cron(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        let fields = inner.split_whitespace().count();
        if fields != 6 {
            return Err(format!(
                "{text:?} is not a valid cron expression: it has {fields} fields, EventBridge's \
                 have six (minutes hours day-of-month month day-of-week year)"
            ));
        }
        return Ok(Expression::Cron(inner.to_string()));
    }
    Err(format!(
        "{text:?} is not a schedule expression: EventBridge takes rate(value unit) or cron(fields)"
    ))
}

fn parse_rate(inner: &str) -> Result<Duration, String> {
    let fields: Vec<&str> = inner.split_whitespace().collect();
    if inner.trim() != inner {
        return Err("no white space may follow `(` or precede `)`".into());
    }
    let [value, unit] = fields.as_slice() else {
        return Err(format!(
            "it needs two fields, a value and a unit, separated by white space; it has {}",
            fields.len()
        ));
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "the value {value:?} is not a positive whole number"
        ));
    }
    let n: u64 = value
        .parse()
        .map_err(|_| format!("the value {value:?} is too large"))?;
    if n == 0 {
        return Err("the value must be positive, not 0".into());
    }
    let (secs, singular) = match *unit {
        "minute" => (60, true),
        "minutes" => (60, false),
        "hour" => (3_600, true),
        "hours" => (3_600, false),
        "day" => (86_400, true),
        "days" => (86_400, false),
        other => {
            return Err(format!(
                "the unit {other:?} is not one of minute, minutes, hour, hours, day, days"
            ))
        }
    };
    if singular != (n == 1) {
        return Err(format!(
            "the unit must be singular when the value is 1 and plural otherwise (rate({n} {unit}) \
             is refused by EventBridge)"
        ));
    }
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("the value {value:?} is too large"))
}

/// How often `schedule` sends its event: `every_secs` when given, else the rate of its
/// expression. A `cron(...)` expression needs `every_secs`.
pub fn period(schedule: &ScheduleConfig) -> Result<Duration, String> {
    let expression = parse_expression(&schedule.expression)?;
    match (schedule.every_secs, expression) {
        (Some(0), _) => Err("`every_secs` must be at least 1".into()),
        (Some(secs), _) => Ok(Duration::from_secs(secs)),
        (None, Expression::Rate(period)) => Ok(period),
        (None, Expression::Cron(_)) => Err(format!(
            "{:?}: cron(...) schedules are not emulated; give `every_secs` (SWEEP_EVERY_SECS for \
             local/localstack/up) to run it at a fixed period instead, or use rate(...)",
            schedule.expression
        )),
    }
}

/// The ARN of a rule on the default event bus:
/// `arn:aws:events:<region>:<account>:rule/<name>`.
pub fn rule_arn(region: &str, account: &str, name: &str) -> String {
    format!("arn:aws:events:{region}:{account}:rule/{name}")
}

/// `2015-10-08T16:53:06Z`: the `time` of an EventBridge event (whole seconds, UTC).
pub fn event_time(ms: u64) -> String {
    let with_ms = time::rfc3339_ms(ms);
    // `YYYY-MM-DDTHH:MM:SS.mmmZ` without the fraction.
    format!("{}Z", &with_ms[..19])
}

/// The event EventBridge sends a target of a scheduled rule.
pub fn scheduled_event(id: &str, time_ms: u64, account: &str, region: &str, rule: &str) -> Value {
    json!({
        "version": "0",
        "id": id,
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": event_time(time_ms),
        "region": region,
        "resources": [rule],
        "detail": {},
    })
}

/// Delay before delivery retry number `retry` (1-based): doubling from 1 s to at most
/// 8 minutes, or from 100 ms to at most 1 s under `fast` timing.
pub fn retry_delay(timing: Timing, retry: u32) -> Duration {
    let (base_ms, cap_ms): (u64, u64) = match timing {
        Timing::Aws => (1_000, 480_000),
        Timing::Fast => (100, 1_000),
    };
    let factor = 1u64 << retry.saturating_sub(1).min(20);
    Duration::from_millis(base_ms.saturating_mul(factor).min(cap_ms))
}

/// One running schedule.
struct Schedule {
    config: ScheduleConfig,
    rule_arn: String,
    period: Duration,
    timing: Timing,
    registry: Arc<Registry>,
    target: Target,
}

/// Starts the schedule: an event every period until `shutdown` turns true. Fails when the
/// expression is invalid or the function is unknown (the config's validation catches both
/// first).
pub fn spawn(
    config: ScheduleConfig,
    registry: Arc<Registry>,
    timing: Timing,
    shutdown: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, Error> {
    let at = format!("schedule {:?}", config.name);
    let period = period(&config).map_err(|e| format!("{at}: {e}"))?;
    let target = registry
        .resolve(&config.function, None)
        .ok_or_else(|| format!("{at}: unknown function {:?}", config.function))?;
    let schedule = Schedule {
        rule_arn: rule_arn(&registry.region, &registry.account, &config.name),
        config,
        period,
        timing,
        registry,
        target,
    };
    info!(schedule = %schedule.config.name, function = %schedule.config.function,
        expression = %schedule.config.expression, period = ?schedule.period,
        "schedule started");
    Ok(tokio::spawn(Arc::new(schedule).run(shutdown)))
}

impl Schedule {
    async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut deliveries = JoinSet::new();
        let mut next = Instant::now().checked_add(self.period);
        loop {
            let Some(at) = next else {
                // A period too long to represent: it never comes.
                let _ = shutdown.wait_for(|s| *s).await;
                break;
            };
            tokio::select! {
                _ = tokio::time::sleep_until(at) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
            while deliveries.try_join_next().is_some() {}
            let me = self.clone();
            let stop = shutdown.clone();
            deliveries.spawn(async move { me.deliver(stop).await });
            // Periods missed while the runtime was busy are skipped, not made up.
            let now = Instant::now();
            let mut following = at.checked_add(self.period);
            while let Some(t) = following.filter(|t| *t <= now) {
                following = t.checked_add(self.period);
            }
            next = following;
        }
        // Stop retrying deliveries at shutdown.
        deliveries.shutdown().await;
        info!(schedule = %self.config.name, "schedule stopped");
    }

    /// Sends one scheduled event, retrying a refused invocation as the retry policy says.
    async fn deliver(&self, mut shutdown: watch::Receiver<bool>) {
        let c = &self.config;
        let id = uuid::Uuid::new_v4().to_string();
        let event = scheduled_event(
            &id,
            time::now_ms(),
            &self.registry.account,
            &self.registry.region,
            &self.rule_arn,
        );
        let payload = Bytes::from(event.to_string());
        let expires = Instant::now() + Duration::from_secs(c.max_event_age_secs);
        let mut retries = 0u32;
        loop {
            // What the Invoke API does with an `Event` invocation (crate::invoke_api).
            let key = self.target.function.event_key(&payload);
            if !self
                .registry
                .injector()
                .fire(FaultKind::LambdaThrottleInvoke, &key)
            {
                let request_id = self
                    .registry
                    .invoke_async(&self.target, payload.clone(), key);
                info!(schedule = %c.name, function = %c.function, event_id = %id, %request_id,
                    retries, "scheduled event sent");
                return;
            }
            if retries >= c.max_retry_attempts {
                warn!(schedule = %c.name, function = %c.function, event_id = %id, retries,
                    "scheduled event dropped: the invocation was throttled (429) and max_retry_attempts is reached");
                return;
            }
            retries += 1;
            let delay = retry_delay(self.timing, retries);
            if Instant::now() + delay >= expires {
                warn!(schedule = %c.name, function = %c.function, event_id = %id, retries = retries - 1,
                    "scheduled event dropped: the invocation was throttled (429) and the next retry would pass max_event_age_secs");
                return;
            }
            info!(schedule = %c.name, function = %c.function, event_id = %id, %key,
                "fault lambda.throttle_invoke: scheduled event refused (429); retry {retries} in {delay:?}");
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(text: &str) -> Result<Duration, String> {
        match parse_expression(text)? {
            Expression::Rate(d) => Ok(d),
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn rate_expressions_as_eventbridge_takes_them() {
        assert_eq!(rate("rate(1 minute)").unwrap(), Duration::from_secs(60));
        assert_eq!(rate("rate(5 minutes)").unwrap(), Duration::from_secs(300));
        assert_eq!(rate("rate(1 hour)").unwrap(), Duration::from_secs(3_600));
        assert_eq!(rate("rate(12 hours)").unwrap(), Duration::from_secs(43_200));
        assert_eq!(rate("rate(1 day)").unwrap(), Duration::from_secs(86_400));
        assert_eq!(rate("rate(7 days)").unwrap(), Duration::from_secs(604_800));
        assert_eq!(rate("rate(10  minutes)").unwrap(), Duration::from_secs(600));
        for (bad, why) in [
            ("rate(1 minutes)", "singular when the value is 1"),
            ("rate(5 minute)", "singular when the value is 1"),
            ("rate(1 hours)", "singular"),
            ("rate(0 minutes)", "positive, not 0"),
            ("rate(-1 minutes)", "not a positive whole number"),
            ("rate(1.5 minutes)", "not a positive whole number"),
            ("rate(30 seconds)", "not one of minute"),
            ("rate(5 Minutes)", "not one of minute"),
            ("rate(5)", "two fields"),
            ("rate(5 minutes now)", "two fields"),
            ("rate( 5 minutes)", "white space"),
            ("rate(99999999999999999999 days)", "too large"),
            ("rate(999999999999999999 days)", "too large"),
            ("rate 5 minutes", "not a schedule expression"),
            ("every 5 minutes", "not a schedule expression"),
            ("rate(5 minutes", "not a schedule expression"),
        ] {
            let e = parse_expression(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn cron_needs_every_secs() {
        assert_eq!(
            parse_expression("cron(0/5 * * * ? *)").unwrap(),
            Expression::Cron("0/5 * * * ? *".into())
        );
        let e = parse_expression("cron(0 12 * * ?)").unwrap_err();
        assert!(e.contains("5 fields"), "{e}");
        let schedule = |expression: &str, every_secs: Option<u64>| ScheduleConfig {
            name: "r".into(),
            function: "f".into(),
            expression: expression.into(),
            every_secs,
            max_event_age_secs: 60,
            max_retry_attempts: 0,
        };
        let e = period(&schedule("cron(0/5 * * * ? *)", None)).unwrap_err();
        assert!(e.contains("cron(...) schedules are not emulated"), "{e}");
        assert!(e.contains("SWEEP_EVERY_SECS"), "{e}");
        assert_eq!(
            period(&schedule("cron(0/5 * * * ? *)", Some(2))).unwrap(),
            Duration::from_secs(2)
        );
        assert_eq!(
            period(&schedule("rate(1 minute)", None)).unwrap(),
            Duration::from_secs(60)
        );
        assert_eq!(
            period(&schedule("rate(1 minute)", Some(1))).unwrap(),
            Duration::from_secs(1),
            "every_secs wins"
        );
        assert!(period(&schedule("rate(1 minute)", Some(0))).is_err());
        assert!(
            period(&schedule("rate(1 minutes)", Some(1))).is_err(),
            "the expression is checked even when every_secs replaces it"
        );
    }

    #[test]
    fn the_event_is_eventbridges_scheduled_event() {
        let arn = rule_arn("eu-west-1", "123456789012", "lambdafusion-sweep");
        assert_eq!(
            arn,
            "arn:aws:events:eu-west-1:123456789012:rule/lambdafusion-sweep"
        );
        // 2015-10-08T16:53:06.789Z
        let event = scheduled_event(
            "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
            1_444_323_186_789,
            "123456789012",
            "eu-west-1",
            &arn,
        );
        // The example of the EventBridge user guide, with this rule and region.
        assert_eq!(
            event,
            json!({
                "version": "0",
                "id": "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa",
                "detail-type": "Scheduled Event",
                "source": "aws.events",
                "account": "123456789012",
                "time": "2015-10-08T16:53:06Z",
                "region": "eu-west-1",
                "resources": ["arn:aws:events:eu-west-1:123456789012:rule/lambdafusion-sweep"],
                "detail": {}
            })
        );
        // The Rust events crate the functions use reads it as a scheduled event.
        let parsed: aws_lambda_events::event::eventbridge::EventBridgeEvent =
            serde_json::from_value(event).unwrap();
        assert_eq!(parsed.detail_type, "Scheduled Event");
        assert_eq!(parsed.source, "aws.events");
        assert_eq!(
            parsed.time.map(|t| t.timestamp()),
            Some(1_444_323_186),
            "the time is RFC 3339"
        );
    }

    #[test]
    fn retry_delays_double_up_to_a_cap() {
        let ms = |t, r| retry_delay(t, r).as_millis();
        assert_eq!(
            (1..=5).map(|r| ms(Timing::Fast, r)).collect::<Vec<_>>(),
            [100, 200, 400, 800, 1000]
        );
        assert_eq!(ms(Timing::Aws, 1), 1_000);
        assert_eq!(ms(Timing::Aws, 9), 256_000);
        assert_eq!(ms(Timing::Aws, 10), 480_000);
        assert_eq!(ms(Timing::Aws, 185), 480_000);
        // The default policy (185 retries) then spans about 24 hours.
        let total: u128 = (1..=185).map(|r| ms(Timing::Aws, r)).sum();
        assert!(
            (23 * 3_600_000..=25 * 3_600_000).contains(&total),
            "{total}"
        );
    }
}

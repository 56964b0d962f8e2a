//! The targets: one table of rows ([`ROWS`]), each a figure of this run, what it is set
//! against (a baseline of the same run), and its goal, all judged by [`judge`]. Their words
//! are in templates/targets.md.j2, one macro a row.

use minijinja::Value;
use minijinja::value::Serde;
use serde::Serialize;

use crate::record::Call;
use crate::report::{KIND_SCENARIO, Report};

use super::names::*;
use super::{Collected, Runs};

/// One row's verdict in words, as the document and `seckill-bench markdown` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Target {
    pub what: String,
    pub measured: String,
    pub against: String,
    pub ratio: Option<f64>,
    pub goal: String,
    /// `None`: not measured in this run, or a row without a goal.
    pub met: Option<bool>,
}

/// Which row: names its macro in templates/targets.md.j2.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
enum Id {
    AcceptAlone,
    AcceptAloneVsRabbit,
    WholeVsRabbit,
    Sustained,
    OverloadAnswers,
    OverloadP99,
    OverloadKept,
    OverloadInvariants,
    SoldOutVsHop,
    HopVsHealthz,
    Backlog,
    StormRate,
    StormSpike,
    RoomJoins,
    RoomPolls,
    RoomMemory,
    RoomAdmitted,
    PushMemory,
    PushRest,
    PushLatency,
    PushHop,
    PushRequests,
    Seed,
    LargestMemory,
    Invariants,
}

/// Where a figure comes from.
#[derive(Clone, Copy)]
enum Figure {
    /// The median run of a measurement; `None` when that run has no such figure.
    Of(&'static str, fn(&Report) -> Option<f64>),
    /// The whole run; `None`: nothing measured it.
    Whole(fn(&Collected) -> Option<f64>),
}

impl Figure {
    /// `None`: not measured; `Some(None)`: measured, without the figure.
    fn read(self, c: &Collected) -> Option<Option<f64>> {
        match self {
            Self::Of(name, f) => c.report(name).map(|(r, _)| f(r)),
            Self::Whole(f) => f(c).map(Some),
        }
    }
}

/// What the figure is divided by for the ratio.
#[derive(Clone, Copy)]
enum Against {
    Nothing,
    /// Without it the row is not measured.
    Required(Figure),
    /// Without it the row only lacks its ratio.
    IfMeasured(Figure),
}

#[derive(Clone, Copy)]
enum Cmp {
    AtLeast,
    Below,
    AtMost,
}

impl Cmp {
    fn holds(self, v: f64, goal: f64) -> bool {
        match self {
            Self::AtLeast => v >= goal,
            Self::Below => v < goal,
            Self::AtMost => v <= goal,
        }
    }
}

/// What is held to the goal: the figure, or its ratio. Rows without a goal give context and
/// are left out when not measured.
#[derive(Clone, Copy)]
enum Goal {
    None,
    Figure(Cmp, f64),
    Ratio(Cmp, f64),
}

struct Row {
    id: Id,
    figure: Figure,
    against: Against,
    goal: Goal,
}

const fn row(id: Id, figure: Figure, against: Against, goal: Goal) -> Row {
    Row { id, figure, against, goal }
}

use {Against::*, Cmp::*, Figure::*, Id::*};

/// The targets, in the document's order.
const ROWS: &[Row] = &[
    row(AcceptAlone, Of(DRAIN_BACKLOG, accepted), Required(Of(HOP, load)), Goal::Ratio(AtLeast, 0.5)),
    row(AcceptAloneVsRabbit, Of(DRAIN_BACKLOG, accepted), Required(Of(AMQP, load)), Goal::None),
    row(WholeVsRabbit, Of(DRAIN, accepted), Required(Of(AMQP, load)), Goal::None),
    row(Sustained, Of(ACCEPT_SUSTAINED, order_p99), Nothing, Goal::Figure(Below, 50.0)),
    row(OverloadAnswers, Of(OVERLOAD, other_answers), Nothing, Goal::Figure(AtMost, 0.0)),
    row(OverloadP99, Of(OVERLOAD, order_p99), Nothing, Goal::Figure(Below, 100.0)),
    row(OverloadKept, Of(OVERLOAD, accepted), IfMeasured(Of(DRAIN, accepted)), Goal::Ratio(AtLeast, 0.9)),
    row(OverloadInvariants, Of(OVERLOAD, broken_invariants), Nothing, Goal::Figure(AtMost, 0.0)),
    row(OverloadAnswers, Of(OVERLOAD_5X, other_answers), Nothing, Goal::Figure(AtMost, 0.0)),
    row(OverloadP99, Of(OVERLOAD_5X, order_p99), Nothing, Goal::Figure(Below, 100.0)),
    row(OverloadKept, Of(OVERLOAD_5X, accepted), IfMeasured(Of(DRAIN, accepted)), Goal::Ratio(AtLeast, 0.8)),
    row(OverloadInvariants, Of(OVERLOAD_5X, broken_invariants), Nothing, Goal::Figure(AtMost, 0.0)),
    row(SoldOutVsHop, Of(SOLD_OUT, load), Required(Of(HOP, load)), Goal::Ratio(AtLeast, 0.8)),
    row(HopVsHealthz, Of(HOP, load), Required(Of(HEALTHZ, load)), Goal::Ratio(AtLeast, 0.5)),
    row(
        Backlog,
        Of(DRAIN_BACKLOG, |r| r.drain.as_ref()?.tail_orders_per_sec),
        IfMeasured(Whole(|c| c.external(PG)?.0.value)),
        Goal::Figure(AtLeast, 10_000.0),
    ),
    row(StormRate, Of(STORM, |r| r.storm.as_ref()?.redis_per_sec), Nothing, Goal::Figure(AtLeast, 10_000.0)),
    row(
        StormSpike,
        Of(STORM, |r| Some(r.storm.as_ref()?.during.accepted_per_sec)),
        IfMeasured(Of(STORM, |r| Some(r.storm.as_ref()?.baseline.accepted_per_sec))),
        Goal::Ratio(AtLeast, 0.8),
    ),
    row(
        RoomJoins,
        Of(ROOM, |r| Some(r.room.as_ref()?.joins_per_sec)),
        IfMeasured(Of(HOP, load)),
        Goal::Ratio(AtLeast, 0.5),
    ),
    row(
        RoomPolls,
        Of(ROOM, |r| Some(r.room.as_ref()?.polls_per_sec)),
        IfMeasured(Of(SOLD_OUT, load)),
        Goal::Ratio(AtLeast, 1.0 / 1.2),
    ),
    row(
        RoomMemory,
        Of(ROOM, |r| Some(r.room.as_ref()?.memory.iter().find(|m| m.users == 1_000_000)?.bytes_per_user)),
        Nothing,
        Goal::Figure(AtMost, 64.0),
    ),
    row(
        RoomAdmitted,
        Of(ROOM, |r| r.room.as_ref()?.admitted_per_sec),
        Required(Of(ROOM, |r| Some(f64::from(r.room.as_ref()?.rate)))),
        Goal::None,
    ),
    row(
        PushMemory,
        Of(PUSH, |r| r.push.as_ref().filter(|p| p.opened > 0).map(|p| p.gateway_kib_per_stream)),
        IfMeasured(Of(PUSH, |r| Some(r.push.as_ref()?.idle_connection_kib))),
        Goal::Figure(AtMost, 10.0),
    ),
    row(PushRest, Of(PUSH, |r| Some(r.push.as_ref()?.gateway_rest_cpu_pct)), Nothing, Goal::None),
    row(
        PushLatency,
        Of(PUSH, |r| r.push.as_ref().filter(|p| p.told > 0).map(|p| p.commit_to_event.p99_ms)),
        Nothing,
        Goal::Figure(Below, 50.0),
    ),
    row(PushHop, Of(PUSH, |r| Some(r.push.as_ref()?.notice_to_event.p99_ms)), Nothing, Goal::None),
    row(
        PushRequests,
        Of(PUSH, |r| Some(r.push.as_ref()?.stream_half.per_accepted)),
        Required(Of(PUSH, |r| Some(r.push.as_ref()?.poll_half.per_accepted))),
        Goal::None,
    ),
    row(Seed, Of(SEED, |r| r.drain.as_ref()?.all_answered_within_s), Nothing, Goal::Figure(AtMost, 0.25)),
    row(LargestMemory, Whole(|c| Some(largest_service_memory(c)?.mib)), Nothing, Goal::Figure(AtMost, 100.0)),
    row(
        Invariants,
        Whole(|c| Some(scenario_runs(c).count() as f64).filter(|n| *n > 0.0)),
        Nothing,
        Goal::None,
    ),
];

/// A row judged: what its macro is handed.
#[derive(Serialize)]
struct Judged {
    /// The measurement the figure is read from (empty for the whole run).
    name: &'static str,
    measured: bool,
    figure: Option<f64>,
    reference: Option<f64>,
    ratio: Option<f64>,
    goal: Option<f64>,
    met: Option<bool>,
}

/// Every row judged the same way: not measured without its figure's run (or a required
/// reference); a run without the figure misses the goal; a ratio goal with its reference not
/// measured is not judged. `None`: a row without a goal, not measured, is left out.
fn judge(row: &Row, c: &Collected) -> Option<Judged> {
    let figure = row.figure.read(c);
    let (reference, required) = match row.against {
        Nothing => (None, false),
        Required(f) => (f.read(c), true),
        IfMeasured(f) => (f.read(c), false),
    };
    let measured = figure.is_some() && (!required || reference.is_some());
    let figure = figure.flatten().filter(|_| measured);
    let ratio = figure.zip(reference.flatten().filter(|r| *r > 0.0)).map(|(f, r)| f / r);
    let (met, goal) = match row.goal {
        Goal::None if !measured => return None,
        Goal::None => (None, None),
        Goal::Figure(cmp, goal) => (Some(figure.is_some_and(|f| cmp.holds(f, goal))), Some(goal)),
        Goal::Ratio(cmp, goal) => (reference.map(|_| ratio.is_some_and(|r| cmp.holds(r, goal))), Some(goal)),
    };
    let name = match row.figure {
        Of(name, _) => name,
        Whole(_) => "",
    };
    Some(Judged {
        name,
        measured,
        figure,
        reference: reference.flatten(),
        ratio,
        goal,
        met: met.filter(|_| measured),
    })
}

/// The targets of this run, each judged and put in words.
pub fn targets(c: &Collected) -> anyhow::Result<Vec<Target>> {
    let env = super::environment()?;
    let runs = Runs::new(c);
    let template = env.get_template("targets.md")?;
    let mut state = template.render_captured(Serde(&runs))?;
    let mut out = Vec::new();
    for (row, judged) in ROWS.iter().filter_map(|row| Some((row, judge(row, c)?))) {
        let id = Value::from(Serde(row.id));
        let text = state
            .with_state_mut(|s| s.call_macro(id.as_str().unwrap_or(""), &[Value::from(Serde(&judged))]))?;
        // A macro writes four lines: what, measured, against, goal.
        let mut lines = text.split('\n').map(str::to_owned);
        let mut line = || lines.next().unwrap_or_default();
        out.push(Target {
            what: line(),
            measured: line(),
            against: line(),
            goal: line(),
            ratio: judged.ratio,
            met: judged.met,
        });
    }
    Ok(out)
}

fn load(r: &Report) -> Option<f64> {
    Some(r.load_per_sec())
}

fn accepted(r: &Report) -> Option<f64> {
    Some(accepted_per_sec(r))
}

/// The order call's p99 over all its answers.
fn order_p99(r: &Report) -> Option<f64> {
    r.row(Call::Order.name(), "all").map(|x| x.latency.p99_ms)
}

/// Order calls answered neither 202 nor `503 BUSY`; none without order calls.
fn other_answers(r: &Report) -> Option<f64> {
    let a = OrderAnswers::of(r);
    (a.calls > 0).then(|| a.other.iter().map(|(_, n)| *n as f64).sum())
}

/// Invariants broken; none when none were checked.
fn broken_invariants(r: &Report) -> Option<f64> {
    (!r.invariants.is_empty()).then(|| r.invariants.iter().filter(|x| !x.ok).count() as f64)
}

pub(super) fn accepted_per_sec(r: &Report) -> f64 {
    r.drain.as_ref().map_or(0.0, |x| x.accepted_per_sec)
}

pub(super) fn scenario_runs(c: &Collected) -> impl Iterator<Item = &Report> {
    c.reports.values().flatten().filter(|r| r.kind == KIND_SCENARIO)
}

/// The order calls of a run by answer: 202, `503 BUSY`, anything else (a timeout, a
/// connection error, another status, a 503 that was not BUSY).
#[derive(Debug, Default, PartialEq, Serialize)]
pub(super) struct OrderAnswers {
    pub(super) calls: u64,
    pub(super) accepted: u64,
    pub(super) busy: u64,
    pub(super) other: Vec<(String, u64)>,
}

impl OrderAnswers {
    /// From the per-status rows. The report counts BUSY answers per click, path-token calls
    /// included: the 503 rows of the order call are BUSY up to that count (exact without path
    /// tokens, as overload runs).
    pub(super) fn of(r: &Report) -> Self {
        let mut a = Self::default();
        let mut busy_left = r.buy.as_ref().map_or(0, |b| b.busy_answers);
        for row in r.calls.iter().filter(|x| x.call == Call::Order.name() && x.outcome != "all") {
            a.calls += row.count;
            match row.outcome.as_str() {
                "202" => a.accepted += row.count,
                "503" => {
                    let busy = row.count.min(busy_left);
                    busy_left -= busy;
                    a.busy += busy;
                    if row.count > busy {
                        a.other.push(("503 not BUSY".into(), row.count - busy));
                    }
                }
                other => a.other.push((other.into(), row.count)),
            }
        }
        a
    }
}

/// The largest resident memory of any service process: which, in which run.
#[derive(Serialize)]
pub(super) struct LargestMemory<'a> {
    pub(super) mib: f64,
    pub(super) process: &'a str,
    pub(super) run: &'a str,
    /// The kernel's high-water mark (VmHWM) was above the sampled peak.
    pub(super) hwm: bool,
}

/// The largest resident memory of any service process (a service or a replica of it, the
/// bench's extra gateways included) over every measurement of the run: the RSS sampled during
/// each, and the kernel's high-water mark (VmHWM) at its end, which catches a peak between
/// samples.
pub(super) fn largest_service_memory(c: &Collected) -> Option<LargestMemory<'_>> {
    const SERVICES: [&str; 4] = ["gateway", "seckill-service", "order-service", "stock-service"];
    let is_service = |name: &str| {
        SERVICES
            .iter()
            .any(|s| name.strip_prefix(s).is_some_and(|rest| rest.is_empty() || rest.starts_with('-')))
    };
    c.reports
        .values()
        .flatten()
        .flat_map(|r| r.memory.iter().filter(|m| is_service(&m.name)).map(move |m| (m, r)))
        .map(|(m, r)| LargestMemory {
            mib: m.peak_rss_mib.max(m.vm_hwm_mib),
            process: &m.name,
            run: &r.name,
            hwm: m.vm_hwm_mib > m.peak_rss_mib,
        })
        .max_by(|a, b| a.mib.total_cmp(&b.mib))
}

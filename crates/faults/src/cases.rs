//! The fault cases: each is a list of [`Step`]s run while the buyers arrive, from the moment
//! the sale opens. [`Step::Fault`] marks the instant the fault is counted from and
//! [`Step::Back`] the instant everything is running again, so the recovery times mean the same
//! thing in every case. Each case also says how many replicas of every service it runs, and
//! which checks beyond the suite's usual ones it adds ([`Extra`]).

use std::time::Duration;

use anyhow::bail;

use seckill_harness::fleet::{Svc, Unit};

use crate::room::Plan;
use crate::servers::Action;

/// One of the suite's private servers ([`crate::servers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    Postgres,
    Redis,
    RabbitMq,
}

impl Server {
    pub fn kind(self) -> &'static str {
        match self {
            Self::Postgres => "pg",
            Self::Redis => "redis",
            Self::RabbitMq => "rabbitmq",
        }
    }

    /// The actions that take it down and bring it back as a service sees it (connections
    /// refused, then accepted). RabbitMQ's application is stopped, not its node: the same
    /// refusal, back in seconds rather than a node's minute.
    pub fn down_and_up(self) -> (Action, Action) {
        match self {
            Self::Postgres | Self::Redis => (Action::Stop, Action::Start),
            Self::RabbitMq => (Action::StopApp, Action::StartApp),
        }
    }

    fn short(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::Redis => "redis",
            Self::RabbitMq => "rabbitmq",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Postgres => "PostgreSQL",
            Self::Redis => "Redis",
            Self::RabbitMq => "RabbitMQ",
        }
    }
}

/// What the driver does during a case, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Wait(Duration),
    /// The fault's instant: recovery times count from here.
    Fault,
    /// Everything runs again.
    Back,
    /// SIGKILL: no clean-up of any kind. Several units are all sent the signal before any is
    /// reaped: they die at the same instant.
    Kill9(Vec<Unit>),
    /// SIGTERM, then wait for the process to exit (its graceful shutdown).
    Term(Unit),
    /// Start the binary and wait until its /readyz answers 200.
    Start(Unit),
    /// Start the binary while a server it needs is down: wait until it serves `/healthz`
    /// (it must not exit), and note what its `/readyz` says it waits for.
    StartWaiting(Unit),
    /// Wait until its /readyz answers 200 (after the server it waited for is back), without
    /// a restart.
    AwaitReady(Unit),
    /// The server a case stopped is back: the buy path must answer again within
    /// `verdict::BACK_AFTER_SERVER_S` of this instant.
    ServerBack,
    /// SIGSTOP: the process freezes with its connections open.
    Pause(Unit),
    /// SIGCONT.
    Resume(Unit),
    /// An action on a private server.
    Ctl(Server, Action),
}

/// A check a case adds to the suite's usual ones (see `replicas`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// Every seckill-service replica, asked directly after the sell-out, answers SOLD_OUT.
    SoldOutEverywhere,
    /// Every order-service replica consumed buy requests.
    ConsumersShare,
    /// One user clicking on every gateway in turn gets through no more than one limit allows.
    OneLimit,
    /// The sale has a waiting room: its users join and poll, those who buy are admitted first
    /// (`room`).
    Room(Plan),
}

impl Extra {
    pub fn room(&self) -> Option<Plan> {
        match self {
            Self::Room(p) => Some(*p),
            _ => None,
        }
    }
}

/// One fault case.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// What happens, in a line.
    pub fault: String,
    pub steps: Vec<Step>,
    /// Buyers arrive evenly over this long from the sale's opening.
    pub arrive_over: Duration,
    /// Stock buckets of the case's sale; with more than one, three buyers in four are served
    /// by bucket 0, so units keep moving to it from the others.
    pub buckets: u8,
    /// Replicas of every service (buyers spread over the gateways).
    pub replicas: usize,
    pub extra: Vec<Extra>,
    /// Buyers follow their accepted requests on the gateway's event streams instead of
    /// polling (`streams`).
    pub streams: bool,
    /// The case's units when not the run's (`Config::units`).
    pub units: Option<i64>,
}

impl Case {
    /// A case on one replica of everything and a sale of one bucket, of the run's size,
    /// its buyers polling: what most cases are; the others set what differs.
    fn new(
        name: impl Into<String>,
        fault: impl Into<String>,
        steps: Vec<Step>,
        arrive_over: Duration,
    ) -> Self {
        Self {
            name: name.into(),
            fault: fault.into(),
            steps,
            arrive_over,
            buckets: 1,
            replicas: 1,
            extra: Vec::new(),
            streams: false,
            units: None,
        }
    }
}

/// The case sizes and timings of a full or a quick run.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// When the fault comes, counted from the sale's opening.
    pub fault_at: Duration,
    /// How long a killed service stays down.
    pub down: Duration,
    pub arrive_over: Duration,
    /// The long order-service outage.
    pub long_outage: Duration,
    /// The waiting-room cases' room, and when their fault comes after the opening.
    pub room: Plan,
    pub room_fault_at: Duration,
}

impl Timing {
    pub fn new(quick: bool) -> Self {
        if quick {
            Self {
                fault_at: Duration::from_secs(1),
                down: Duration::from_secs(2),
                arrive_over: Duration::from_secs(6),
                long_outage: Duration::from_secs(15),
                room: Plan {
                    users: 2_000,
                    rate: 200,
                    admission_secs: 10,
                    before: Duration::from_secs(3),
                    after: Duration::from_secs(3),
                },
                room_fault_at: Duration::from_secs(4),
            }
        } else {
            Self {
                fault_at: Duration::from_millis(1_500),
                down: Duration::from_secs(2),
                arrive_over: Duration::from_secs(10),
                long_outage: Duration::from_secs(60),
                // Users admitted in the first 5 s are closed before the fault and poll after it.
                room: Plan {
                    users: 10_000,
                    rate: 200,
                    admission_secs: 20,
                    before: Duration::from_secs(8),
                    after: Duration::from_secs(10),
                },
                room_fault_at: Duration::from_secs(25),
            }
        }
    }
}

/// The CI subset run by `--quick`.
pub const QUICK: [&str; 7] = [
    "kill9-order",
    "kill9-seckill-buckets",
    "kill9-order-rabbitmq-down",
    "redis-flush-kill",
    "streams-kill9-gateway",
    "room-redis-flush",
    "replicas",
];

/// Most replicas of a service any case runs (the ports the suite may take).
pub const MAX_REPLICAS: usize = 2;

/// Every case, in the order the full suite runs them.
pub fn all(t: Timing) -> Vec<Case> {
    use Step::*;
    let secs = |d: Duration| d.as_secs_f64();
    let mut cases = Vec::new();
    for svc in [Svc::Order, Svc::Seckill, Svc::Stock, Svc::Gateway] {
        cases.push(Case::new(
            format!("kill9-{}", svc.short()),
            format!("kill -9 of {} mid-sale, started again {:.0} s later", svc.name(), secs(t.down)),
            vec![
                Wait(t.fault_at),
                Fault,
                Kill9(vec![Unit::first(svc)]),
                Wait(t.down),
                Start(Unit::first(svc)),
                Back,
            ],
            t.arrive_over,
        ));
    }
    let seckill = Unit::first(Svc::Seckill);
    let fault = format!(
        "kill -9 of seckill-service mid-sale on a sale split over 8 stock buckets, three buyers in four \
         served by one bucket (units keep moving to it from the others), started again {:.0} s later",
        secs(t.down)
    );
    let steps = vec![Wait(t.fault_at), Fault, Kill9(vec![seckill]), Wait(t.down), Start(seckill), Back];
    cases.push(Case { buckets: 8, ..Case::new("kill9-seckill-buckets", fault, steps, t.arrive_over) });
    for svc in [Svc::Order, Svc::Seckill, Svc::Stock, Svc::Gateway] {
        cases.push(Case::new(
            format!("sigterm-{}", svc.short()),
            format!(
                "SIGTERM of {} under load (graceful shutdown), started again as soon as it exited",
                svc.name()
            ),
            vec![Wait(t.fault_at), Fault, Term(Unit::first(svc)), Start(Unit::first(svc)), Back],
            t.arrive_over,
        ));
    }
    // A service killed and started again while a server is down: it must start and wait
    // (no exit, no crash loop), and take work again once the server is back.
    for server in [Server::RabbitMq, Server::Postgres, Server::Redis] {
        let (down, up) = server.down_and_up();
        for svc in [Svc::Stock, Svc::Seckill, Svc::Order] {
            let unit = Unit::first(svc);
            cases.push(Case::new(
                format!("kill9-{}-{}-down", svc.short(), server.short()),
                format!(
                    "{} down mid-sale and kill -9 of {} while it is down, started again {:.0} s later (the \
                     server still down), {} back {:.0} s after that",
                    server.name(),
                    svc.name(),
                    secs(t.down),
                    server.name(),
                    secs(t.down)
                ),
                vec![
                    Wait(t.fault_at),
                    Fault,
                    Ctl(server, down),
                    Kill9(vec![unit]),
                    Wait(t.down),
                    StartWaiting(unit),
                    Wait(t.down),
                    Ctl(server, up),
                    ServerBack,
                    AwaitReady(unit),
                    Back,
                ],
                // Buyers keep arriving after the server is back.
                t.arrive_over + Duration::from_secs(6),
            ));
        }
    }
    let before = Duration::from_secs(1);
    let order = Unit::first(Svc::Order);
    cases.push(Case::new(
        "rabbitmq-restart",
        "RabbitMQ restart (stop_app, start_app) with a backlog queued: order-service stopped 1 s \
         into the sale, the broker restarted 2 s later, order-service started once it is back",
        vec![
            Wait(before),
            Term(order),
            Wait(Duration::from_secs(2)),
            Fault,
            Ctl(Server::RabbitMq, Action::Restart),
            Start(order),
            Back,
        ],
        // Buyers keep arriving after the broker is back (its restart takes several seconds).
        t.arrive_over + Duration::from_secs(4),
    ));
    cases.push(Case::new(
        "postgres-restart",
        "PostgreSQL restart while the backlog drains: order-service frozen (SIGSTOP) 1 s into the \
         sale so a backlog builds, 3 s later PostgreSQL stopped (pg_ctl -m fast: every connection \
         cut) and order-service resumed into it, PostgreSQL started 2 s later",
        vec![
            Wait(before),
            Pause(order),
            Wait(Duration::from_secs(3)),
            Fault,
            Ctl(Server::Postgres, Action::Stop),
            Resume(order),
            Wait(Duration::from_secs(2)),
            Ctl(Server::Postgres, Action::Start),
            Back,
        ],
        t.arrive_over,
    ));
    cases.push(Case::new(
        "redis-flush-kill",
        "Redis FLUSHALL + CLIENT KILL TYPE normal with requests queued: order-service stopped 1 s \
         into the sale, the flush 3 s later, order-service started right after (a Redis restart \
         without persistence, or a failover to a replica that missed writes)",
        vec![
            Wait(before),
            Term(order),
            Wait(Duration::from_secs(3)),
            Fault,
            Ctl(Server::Redis, Action::FlushKill),
            Start(order),
            Back,
        ],
        t.arrive_over,
    ));
    cases.push(Case::new(
        "redis-restart",
        "Redis restart mid-sale (SHUTDOWN NOSAVE, then started empty)",
        vec![Wait(t.fault_at), Fault, Ctl(Server::Redis, Action::Restart), Back],
        t.arrive_over,
    ));
    cases.push(Case::new(
        format!("order-down-{}s", t.long_outage.as_secs()),
        format!(
            "order-service down for {:.0} s (SIGTERM 1 s into the sale, started again after the outage): \
             buyers are accepted and wait in the queue",
            secs(t.long_outage)
        ),
        vec![Wait(before), Fault, Term(order), Wait(t.long_outage), Start(order), Back],
        t.arrive_over,
    ));
    // Buyers following their results on event streams through a Redis restart (the gateways'
    // notice channel drops), a RabbitMQ restart and an order-service outage: every final
    // answer arrives on a stream, once.
    let with_streams = |c: &Case, name: &str| Case {
        name: format!("streams-{name}"),
        fault: format!(
            "{}; every buyer follows its result on the gateway's event stream instead of polling",
            c.fault
        ),
        streams: true,
        ..c.clone()
    };
    for name in ["redis-restart", "rabbitmq-restart"] {
        let c = cases.iter().find(|c| c.name == name).map(|c| with_streams(c, name));
        cases.extend(c);
    }
    let outage = Duration::from_secs(10);
    let fault = format!(
        "order-service down for {:.0} s (SIGTERM 1 s into the sale, started again after the outage); every \
         buyer follows its result on the gateway's event stream instead of polling",
        secs(outage)
    );
    let steps = vec![Wait(before), Fault, Term(order), Wait(outage), Start(order), Back];
    cases.push(Case { streams: true, ..Case::new("streams-order-down-10s", fault, steps, t.arrive_over) });
    // A gateway killed under a thousand open streams: order-service is frozen while the sale's
    // thousand units are bought, so every accepted buyer's stream is open when gateway replica
    // 1 dies; its buyers reconnect to replica 0, and the orders come once order-service runs.
    let (gateway1, order1) = (Unit::new(Svc::Gateway, 1), Unit::new(Svc::Order, 1));
    let fault = format!(
        "two replicas of each service, 1,000 units, every buyer following its result on a stream: both \
         order-service replicas frozen (SIGSTOP) 1 s into the sale, kill -9 of gateway replica 1 5 s \
         later with the streams of the accepted buyers open, order-service resumed and the gateway \
         started again {:.0} s later",
        secs(t.down)
    );
    let steps = vec![
        Wait(before),
        Pause(order),
        Pause(order1),
        Wait(Duration::from_secs(5)),
        Fault,
        Kill9(vec![gateway1]),
        Wait(t.down),
        Resume(order),
        Resume(order1),
        Start(gateway1),
        Back,
    ];
    cases.push(Case {
        replicas: 2,
        streams: true,
        units: Some(1_000),
        ..Case::new("streams-kill9-gateway", fault, steps, t.arrive_over)
    });
    // A waiting room of thousands when the fault hits (never a Redis loss with a restart of
    // seckill-service: each keeps what the other loses of when admissions began).
    let p = t.room;
    let room = |name: String, fault: String, steps: Vec<Step>| {
        let fault = format!(
            "{fault}, {:.0} s after the opening, {} users in a waiting room of {}/s ({} s admissions), joined \
             over the {:.0} s before the opening and the {:.0} s after",
            secs(t.room_fault_at),
            p.users,
            p.rate,
            p.admission_secs,
            secs(p.before),
            secs(p.after)
        );
        Case { extra: vec![Extra::Room(p)], ..Case::new(name, fault, steps, p.before + p.after) }
    };
    for svc in [Svc::Seckill, Svc::Gateway] {
        let unit = Unit::first(svc);
        cases.push(room(
            format!("room-kill9-{}", svc.short()),
            format!("kill -9 of {}, started again {:.0} s later", svc.name(), secs(t.down)),
            vec![Wait(t.room_fault_at), Fault, Kill9(vec![unit]), Wait(t.down), Start(unit), Back],
        ));
    }
    cases.push(room(
        "room-redis-flush".into(),
        "Redis FLUSHALL + CLIENT KILL TYPE normal".into(),
        vec![Wait(t.room_fault_at), Fault, Ctl(Server::Redis, Action::FlushKill), Back],
    ));
    // Last: the fleet grows to two replicas once, at the end of a run.
    let (seckill1, order1) = (Unit::new(Svc::Seckill, 1), Unit::new(Svc::Order, 1));
    cases.push(Case {
        replicas: 2,
        extra: vec![Extra::SoldOutEverywhere, Extra::ConsumersShare, Extra::OneLimit],
        ..Case::new(
            "replicas",
            format!(
                "two replicas of every service, buyers spread over both gateways: kill -9 of seckill-service \
                 replica 1 and order-service replica 1 at the same instant mid-sale, both started again {:.0} s \
                 later; one user clicking on both gateways in turn all the while",
                secs(t.down)
            ),
            vec![
                Wait(t.fault_at),
                Fault,
                Kill9(vec![seckill1, order1]),
                Wait(t.down),
                Start(seckill1),
                Start(order1),
                Back,
            ],
            t.arrive_over,
        )
    });
    cases
}

/// The cases to run: those named (in the suite's order), else the quick subset or all of them.
/// `order-down` stands for the long outage whatever its length.
pub fn select(t: Timing, quick: bool, names: &[String]) -> anyhow::Result<Vec<Case>> {
    let all = all(t);
    let wanted: Vec<String> = if names.is_empty() {
        if quick { QUICK.iter().map(|n| (*n).to_owned()).collect() } else { return Ok(all) }
    } else {
        names.to_vec()
    };
    let matches =
        |c: &Case, n: &str| c.name == n || (n.starts_with("order-down") && c.name.starts_with("order-down"));
    if let Some(unknown) = wanted.iter().find(|n| !all.iter().any(|c| matches(c, n))) {
        bail!(
            "no fault case `{unknown}`; the cases are: {}",
            all.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    }
    Ok(all.into_iter().filter(|c| wanted.iter().any(|n| matches(c, n))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_case_marks_its_fault_and_its_return() {
        let cases = all(Timing::new(false));
        assert_eq!(cases.len(), 31);
        for c in &cases {
            assert!((1..=MAX_REPLICAS).contains(&c.replicas), "{}", c.name);
            // A step may only act on a replica the case runs.
            for s in &c.steps {
                let units = match s {
                    Step::Kill9(us) => us.clone(),
                    Step::Term(u)
                    | Step::Start(u)
                    | Step::StartWaiting(u)
                    | Step::AwaitReady(u)
                    | Step::Pause(u)
                    | Step::Resume(u) => vec![*u],
                    _ => Vec::new(),
                };
                assert!(units.iter().all(|u| u.replica < c.replicas), "{}: {s:?}", c.name);
            }
            let fault = c.steps.iter().position(|s| *s == Step::Fault);
            let back = c.steps.iter().position(|s| *s == Step::Back);
            assert!(matches!((fault, back), (Some(f), Some(b)) if f < b), "{}", c.name);
        }
        let names: std::collections::HashSet<_> = cases.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names.len(), cases.len(), "names are unique");
    }

    #[test]
    fn cases_are_selected_by_name() {
        let t = Timing::new(true);
        let quick: Vec<_> = select(t, true, &[]).unwrap().into_iter().map(|c| c.name).collect();
        assert_eq!(quick, QUICK);
        let named = select(t, true, &["order-down".into(), "kill9-gateway".into()]).unwrap();
        assert_eq!(
            named.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["kill9-gateway", "order-down-15s"]
        );
        assert!(select(t, false, &["nope".into()]).is_err());
        assert_eq!(select(t, false, &[]).unwrap().len(), 31);
    }

    #[test]
    fn each_service_is_started_again_while_each_server_is_down() {
        let cases = all(Timing::new(false));
        for server in ["rabbitmq", "postgres", "redis"] {
            for svc in ["stock", "seckill", "order"] {
                let name = format!("kill9-{svc}-{server}-down");
                let c = cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
                let at = |want: fn(&Step) -> bool| c.steps.iter().position(want).unwrap();
                let (stop, kill, start) = (
                    at(|s| matches!(s, Step::Ctl(_, Action::Stop | Action::StopApp))),
                    at(|s| matches!(s, Step::Kill9(_))),
                    at(|s| matches!(s, Step::StartWaiting(_))),
                );
                let (up, back) = (
                    at(|s| matches!(s, Step::Ctl(_, Action::Start | Action::StartApp))),
                    at(|s| *s == Step::ServerBack),
                );
                assert!(stop < kill && kill < start && start < up && up < back, "{name}: {:?}", c.steps);
            }
        }
    }

    #[test]
    fn the_replicas_case_kills_two_replicas_at_once_and_checks_more() {
        let c = select(Timing::new(true), true, &["replicas".into()]).unwrap().remove(0);
        assert_eq!(c.replicas, 2);
        let kill = Step::Kill9(vec![Unit::new(Svc::Seckill, 1), Unit::new(Svc::Order, 1)]);
        assert!(c.steps.contains(&kill), "{:?}", c.steps);
        assert_eq!(c.extra.len(), 3);
        // Every other case runs one replica (but the gateway kill under streams) and adds nothing
        // but its waiting room.
        let others = ["replicas", "streams-kill9-gateway"];
        assert!(all(Timing::new(false)).iter().filter(|c| !others.contains(&c.name.as_str())).all(|c| {
            c.replicas == 1
                && c.extra.iter().all(|e| e.room().is_some())
                && c.extra.is_empty() != c.name.starts_with("room-")
        }));
    }

    #[test]
    fn replicas_are_named_as_scripts_up_sh_names_their_files() {
        assert_eq!(Unit::first(Svc::Order).stem(), "order-service");
        assert_eq!(Unit::new(Svc::Seckill, 1).to_string(), "seckill-service-1");
    }
}

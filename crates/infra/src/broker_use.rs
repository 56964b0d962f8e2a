//! What a service does on the broker, in one value: what its publisher declares and where it
//! publishes, and what each of its consumers consumes and declares. The service's startup
//! builds its publisher and consumers from it (the publisher refuses any other destination, a
//! consumer of an unlisted source is a startup error), and crates/deploy-check derives the
//! permissions of the service's broker user from the same value.

use std::sync::Arc;

use anyhow::Context;
use seckill_common::config::AmqpSettings;
use seckill_common::trust::{Peer, Trust};

use crate::amqp::{Declare, Destination, Publisher};
use crate::consumer::{ConsumerSpec, Source};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerUse {
    /// What the publisher declares at start and after reconnecting.
    pub publisher_declares: Vec<Declare>,
    /// Every destination the service publishes to.
    pub publishes: Vec<Destination>,
    /// Every source the service consumes, with what its consumer declares.
    pub consumers: Vec<(Source, Vec<Declare>)>,
}

impl BrokerUse {
    /// The service's publisher, connecting nothing yet (a service starts while the broker is
    /// away): run [`Publisher::keep_connected`] in the background. It declares and publishes
    /// to what is listed here, nothing else.
    pub fn unconnected_publisher(
        &self,
        settings: &AmqpSettings,
        service: &str,
        trust: Arc<Trust>,
    ) -> anyhow::Result<Publisher> {
        Publisher::unconnected(
            settings,
            service,
            trust,
            self.publisher_declares.clone(),
            self.publishes.clone(),
        )
    }

    /// As [`BrokerUse::unconnected_publisher`], connected now (tools and tests).
    pub async fn publisher(
        &self,
        settings: &AmqpSettings,
        service: &str,
        trust: Arc<Trust>,
    ) -> anyhow::Result<Publisher> {
        Publisher::connect(settings, service, trust, self.publisher_declares.clone(), self.publishes.clone())
            .await
            .context("cannot connect to RabbitMQ")
    }

    /// The consumer of `source`, declaring what is listed for it; an error when `source` is not
    /// listed (then the description would not say what the service consumes).
    pub fn consumer(
        &self,
        name: impl Into<String>,
        source: Source,
        from: Peer,
        trust: Arc<Trust>,
    ) -> anyhow::Result<ConsumerSpec> {
        let name = name.into();
        let declares = self
            .consumers
            .iter()
            .find(|(s, _)| *s == source)
            .map(|(_, declares)| declares.clone())
            .with_context(|| {
                format!("consumer {name}: {source:?} is not among the sources of its BrokerUse")
            })?;
        Ok(ConsumerSpec::new(name, source, from, trust, declares))
    }
}

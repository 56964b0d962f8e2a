//! A sale's Redis data over its buckets, as the rebuild, the repair and the audit read it.

use seckill_common::api::BucketAudit;
use seckill_common::keys::SaleBucket;
use seckill_common::scripts::Epoch;
use seckill_web::ApiError;

use crate::gate::Snapshot;
use crate::state::AppState;

/// A sale's Redis data over its buckets: each bucket's look is atomic, the buckets are looked
/// at side by side (not one instant: see `in_transit`).
pub(crate) struct SaleSnapshot {
    pub(crate) buckets: Vec<(SaleBucket, Snapshot)>,
}

impl SaleSnapshot {
    pub(crate) async fn take(state: &AppState, buckets: &[SaleBucket]) -> Result<Self, ApiError> {
        // All at once: on a cluster the buckets' nodes answer side by side.
        let taken =
            futures_util::future::try_join_all(buckets.iter().map(|at| state.gate.snapshot(*at))).await?;
        Ok(Self { buckets: buckets.iter().copied().zip(taken).collect() })
    }

    /// The units Redis will still sell, if every bucket is loaded.
    pub(crate) fn stock(&self) -> Option<i64> {
        self.buckets.iter().map(|(_, s)| s.stock).sum()
    }

    /// The units of the buckets that are loaded.
    pub(crate) fn loaded_stock(&self) -> i64 {
        self.buckets.iter().filter_map(|(_, s)| s.stock).sum()
    }

    /// Units on their way between two buckets: in neither stock yet. A transfer given and not
    /// yet settled is also in its receiver's stock, for an instant (or until the reconciler
    /// settles it, if its process died): counted twice then, which errs on the side of
    /// selling fewer.
    pub(crate) fn in_transit(&self) -> i64 {
        self.buckets.iter().map(|(_, s)| s.in_transit).sum()
    }

    pub(crate) fn in_flight(&self) -> Vec<uuid::Uuid> {
        self.buckets.iter().flat_map(|(_, s)| s.in_flight.iter().copied()).collect()
    }

    pub(crate) fn ordered(&self) -> i64 {
        self.buckets.iter().map(|(_, s)| s.ordered).sum()
    }

    pub(crate) fn pending(&self) -> i64 {
        self.buckets.iter().map(|(_, s)| s.pending).sum()
    }

    /// The units held back while recovering (each bucket rebuilt after a loss holds the same
    /// count: see `rebuild_locked`).
    pub(crate) fn holdback(&self) -> Option<i64> {
        self.buckets.iter().filter_map(|(_, s)| s.holdback).max()
    }

    /// The newest load of any bucket.
    pub(crate) fn epoch(&self) -> Option<Epoch> {
        self.buckets.iter().filter_map(|(_, s)| s.epoch).max_by_key(|e| e.loaded_at_ms())
    }

    /// Each bucket's figures, for a sale of several (none for a sale of one).
    pub(crate) fn per_bucket(&self) -> Vec<BucketAudit> {
        if self.buckets.len() <= 1 {
            return Vec::new();
        }
        self.buckets
            .iter()
            .map(|(at, s)| BucketAudit {
                bucket: at.bucket,
                stock: s.stock,
                in_transit: s.in_transit,
                reservations: s.ordered + i64::try_from(s.in_flight.len()).unwrap_or(i64::MAX),
            })
            .collect()
    }

    pub(crate) fn not_loaded(&self) -> Vec<u8> {
        self.buckets.iter().filter(|(_, s)| s.stock.is_none()).map(|(at, _)| at.bucket).collect()
    }
}

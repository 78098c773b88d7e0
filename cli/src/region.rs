//! `turnstile region ...`: a global limit's ledger by hand — create the table, give each region
//! its first allotment, look at the allotments and the moves in transit, move allotment from one
//! region to another, and finish the moves due to a region.

use std::time::Duration;

use serde::Serialize;
use shared::clock::{Clock, SystemClock, Timestamp};
use shared::gcra::Rate;
use shared::kv::config::parse_period;
use shared::kv::instant::parse_instant;
use shared::region::ledger::{self, read_all, RegionRow};
use shared::region::saga::{self, Move, Raised};
use shared::region::{declarations, Declared, DynamoLedger, LeaseTerms, Mode, RegionError};
use shared::{Error, Result};

/// The ledger table's variable (the stack's output `RegionLedgerTable`).
pub const LEDGER_TABLE_VAR: &str = ledger::TABLE_VAR;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The ledger table.
    #[arg(long, env = LEDGER_TABLE_VAR)]
    table: String,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Create the ledger table (for DynamoDB Local; a deployment's comes from template.yaml).
    CreateTable,
    /// Declare a global limit on the ledger (what each region's scheduled rebalancer runs over)
    /// and give each region its first allotment: the total split evenly.
    Init {
        /// The bucket key (`{nameId}:{id}`).
        #[arg(long)]
        limit: String,
        #[arg(long)]
        total: u64,
        /// The limit's period (`60s`, `1m`...).
        #[arg(long, value_parser = parse_period)]
        period: Duration,
        /// The regions, comma-separated.
        #[arg(long, value_delimiter = ',')]
        regions: Vec<String>,
        /// Bounded mode: a region that cannot refresh may overdraw this many thousandths of the
        /// total, split among the regions (exact mode without it).
        #[arg(long, requires = "overdraw_for")]
        overdraw_permille: Option<u32>,
        /// Bounded mode: for at most this long past its lease (`30s`...).
        #[arg(long, value_parser = parse_period, requires = "overdraw_permille")]
        overdraw_for: Option<Duration>,
        /// The first lease of each region: until each region's scheduled rebalancer first renews
        /// it (three of its intervals: 3m with the default `RegionRebalanceRateMinutes` of 1).
        #[arg(long, value_parser = parse_period, default_value = "3m")]
        lease: Duration,
    },
    /// The allotments, leases and the moves in transit of a global limit.
    Show {
        #[arg(long)]
        limit: String,
    },
    /// Move allotment by hand: the giver lowers its own allotment and the move is recorded; the
    /// receiver raises once the quarantine has passed (`resume`).
    Move {
        #[arg(long)]
        limit: String,
        #[arg(long)]
        from: String,
        #[arg(long)]
        to: String,
        #[arg(long)]
        amount: u64,
        /// The limit's period: the quarantine is the period, the refresh and the clock margin.
        #[arg(long, value_parser = parse_period)]
        period: Duration,
        /// How long a process uses an allotment it read.
        #[arg(long, value_parser = parse_period, default_value = "5s")]
        refresh: Duration,
    },
    /// Record and raise the moves to a region whose quarantine has passed.
    Resume {
        #[arg(long)]
        limit: String,
        #[arg(long)]
        region: String,
        /// Decide as of this instant (epoch milliseconds or RFC 3339) instead of the clock.
        #[arg(long, value_parser = parse_instant)]
        now: Option<Timestamp>,
    },
}

fn failed(e: RegionError) -> Error {
    Error::Other(e.to_string())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RegionView {
    region: String,
    allotment: u64,
    lease_until: String,
    epoch: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MoveView {
    id: String,
    from: String,
    to: String,
    amount: u64,
    release_at: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Ledger {
    limit: String,
    regions: Vec<RegionView>,
    in_transit: Vec<MoveView>,
    /// Σ allotments + Σ in transit: the limit's total, always.
    accounted: u64,
}

fn view(limit: &str, rows: &[RegionRow]) -> Ledger {
    let moving = saga::in_transit(rows);
    Ledger {
        limit: limit.to_string(),
        accounted: rows.iter().map(|r| r.allotment).sum::<u64>()
            + moving.iter().map(|(_, e)| e.amount).sum::<u64>(),
        regions: rows
            .iter()
            .map(|r| RegionView {
                region: r.region.clone(),
                allotment: r.allotment,
                lease_until: r.lease_until.to_rfc3339(),
                epoch: r.epoch,
            })
            .collect(),
        in_transit: moving
            .into_iter()
            .map(|(id, e)| MoveView {
                id,
                from: e.from,
                to: e.to,
                amount: e.amount,
                release_at: e.release_at.to_rfc3339(),
            })
            .collect(),
    }
}

pub async fn run(args: Args) -> Result<()> {
    let deps = crate::aws::deps().await?;
    let store = DynamoLedger {
        client: deps.dynamo.clone(),
        table: args.table.clone(),
    };
    let now: Timestamp = SystemClock.now();
    match args.command {
        Cmd::CreateTable => {
            ledger::create_table(&store.client, &store.table)
                .await
                .map_err(failed)?;
            crate::print_json(&serde_json::json!({ "created": store.table }))
        }
        Cmd::Init {
            limit,
            total,
            period,
            regions,
            overdraw_permille,
            overdraw_for,
            lease,
        } => {
            let rate = Rate::new(total, total, period).map_err(|e| Error::Other(e.to_string()))?;
            let mode = match (overdraw_permille, overdraw_for) {
                (Some(overdraw_permille), Some(overdraw_for)) => Mode::Bounded {
                    overdraw_permille,
                    overdraw_for,
                },
                _ => Mode::Exact,
            };
            let d = Declared::new(&limit, rate, regions, mode).map_err(failed)?;
            declarations::declare(&store, &d).await.map_err(failed)?;
            ledger::init(&store, &limit, &d.split(), now.plus(lease))
                .await
                .map_err(failed)?;
            let (rows, _) = read_all(&store, &limit).await.map_err(failed)?;
            crate::print_json(&view(&limit, &rows))
        }
        Cmd::Show { limit } => {
            let (rows, _) = read_all(&store, &limit).await.map_err(failed)?;
            crate::print_json(&view(&limit, &rows))
        }
        Cmd::Move {
            limit,
            from,
            to,
            amount,
            period,
            refresh,
        } => {
            let giver = ledger::read_region(&store, &limit, &from)
                .await
                .map_err(failed)?;
            let rate = Rate::new(1, 1, period).map_err(|e| Error::Other(e.to_string()))?;
            let regions = vec![from.clone(), to.clone()];
            let d = Declared::new(&limit, rate, regions, Mode::Exact).map_err(failed)?;
            let q = saga::quarantine(&d, refresh, LeaseTerms::default().clock_margin);
            let mv = Move {
                limit: limit.clone(),
                id: ledger::new_move_id(),
                from,
                to,
                amount,
            };
            saga::lower(&store, &mv, giver.epoch, now.plus(q))
                .await
                .map_err(failed)?;
            saga::record(&store, &limit, &mv.from, &mv.id)
                .await
                .map_err(failed)?;
            let (rows, _) = read_all(&store, &limit).await.map_err(failed)?;
            crate::print_json(&view(&limit, &rows))
        }
        Cmd::Resume {
            limit,
            region,
            now: at,
        } => {
            let now = at.unwrap_or(now);
            let (rows, _) = read_all(&store, &limit).await.map_err(failed)?;
            let mut raised = Vec::new();
            for (id, entry) in saga::in_transit(&rows) {
                if entry.to != region {
                    continue;
                }
                saga::record(&store, &limit, &entry.from, &id)
                    .await
                    .map_err(failed)?;
                if saga::raise(&store, &limit, &id, now)
                    .await
                    .map_err(failed)?
                    == Raised::Now
                {
                    raised.push(id);
                }
            }
            let (rows, _) = read_all(&store, &limit).await.map_err(failed)?;
            crate::print_json(
                &serde_json::json!({ "raised": raised, "ledger": view(&limit, &rows) }),
            )
        }
    }
}

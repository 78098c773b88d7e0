//! One Tokio runtime, one DynamoDB client and one limiter per table set, per process: built on first
//! use and built again in a child after `fork()` (the parent's runtime threads do not exist there).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shared::config::Vars;
use shared::dynamo::CallCounter;
use shared::limit::LimitStore;
use shared::reservation::{NonFungibleLimiter, DEFAULT_RESERVATION_TTL, DEFAULT_TOKEN_TTL};
use shared::table::{AttributeStyle, TableNames};
use shared::token::{shards_from_vars, FungibleLimiter};
use shared::Deps;
use tokio::runtime::Runtime;

use crate::failure::Failure;

/// The endpoint variables, most specific first; a loopback one without credentials gets DynamoDB
/// Local's dummy keys (the SDK's own chain reads both in every other case).
const ENDPOINT_VARS: [&str; 2] = ["AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"];

/// When set to `1`, the client counts its calls and their write and read units (`usage()`): each
/// request then also asks DynamoDB for its consumed capacity, so production leaves it off.
pub const METER_VAR: &str = "TURNSTILE_PY_METER";

/// Runtime worker threads: the calls wait on the network, so two carry any number of callers.
const WORKERS: usize = 2;

/// Everything a process shares. The runtime is leaked on purpose: dropping it in a forked child
/// would join threads that only existed in the parent.
pub struct Core {
    pub rt: &'static Runtime,
    pub deps: Deps,
    /// Calls and units since the last reset, when [`METER_VAR`] asks for them.
    pub counter: Option<CallCounter>,
    fungible: Mutex<HashMap<(String, String), FungibleLimiter>>,
    non_fungible: Mutex<HashMap<NonFungibleKey, NonFungibleLimiter>>,
}

/// (token table, resource index, limit table, bound token lifetime in seconds).
type NonFungibleKey = (String, String, String, u64);

static CORE: Mutex<Option<(u32, Arc<Core>)>> = Mutex::new(None);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The limiter `map` holds for `key`, made by `make` on its first use (under the lock, so two
/// threads asking at once make one).
fn cached<K: Eq + std::hash::Hash, L: Clone>(
    map: &Mutex<HashMap<K, L>>,
    key: K,
    make: impl FnOnce(&K) -> Result<L, Failure>,
) -> Result<L, Failure> {
    let mut map = lock(map);
    if let Some(l) = map.get(&key) {
        return Ok(l.clone());
    }
    let limiter = make(&key)?;
    map.insert(key, limiter.clone());
    Ok(limiter)
}

/// This process's core if it is built already (never blocks on building it).
pub fn current() -> Option<Arc<Core>> {
    let slot = lock(&CORE);
    match slot.as_ref() {
        Some((owner, core)) if *owner == std::process::id() => Some(core.clone()),
        _ => None,
    }
}

/// This process's core, built on first use (the caller has released the GIL: building may wait on
/// the credential chain).
pub fn core() -> Result<Arc<Core>, Failure> {
    let pid = std::process::id();
    let mut slot = lock(&CORE);
    if let Some((owner, core)) = slot.as_ref() {
        if *owner == pid {
            return Ok(core.clone());
        }
    }
    // A forked child: the parent's core refers to threads and sockets this process does not own.
    if let Some(stale) = slot.take() {
        std::mem::forget(stale);
    }
    let core = Arc::new(Core::build()?);
    *slot = Some((pid, core.clone()));
    Ok(core)
}

impl Core {
    fn build() -> Result<Core, Failure> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKERS)
            .thread_name("turnstile-py")
            .enable_all()
            .build()
            .map_err(|e| Failure::Store(format!("starting the Tokio runtime: {e}")))?;
        let rt: &'static Runtime = Box::leak(Box::new(rt));
        let vars = Vars::process();
        let counter = vars
            .bool_or(METER_VAR, false)
            .map_err(shared::Error::from)?
            .then(CallCounter::new);
        let deps = rt.block_on(deps_from_env(vars, counter.as_ref()))?;
        Ok(Core {
            rt,
            deps,
            counter,
            fungible: Mutex::new(HashMap::new()),
            non_fungible: Mutex::new(HashMap::new()),
        })
    }

    fn limit_store(&self, limit_table: Option<&str>) -> Result<LimitStore, Failure> {
        let d = &self.deps;
        Ok(LimitStore::new(
            d.dynamo.clone(),
            limit_table.unwrap_or(&d.tables.limits),
            &d.tables.limit_service_index,
            d.style,
            d.clock.clone(),
            LimitStore::cache_ttl(&d.vars).map_err(shared::Error::from)?,
        ))
    }

    /// The fungible limiter of these tables (`None`: the environment's), one per process.
    pub fn fungible(
        &self,
        token_table: Option<&str>,
        limit_table: Option<&str>,
    ) -> Result<FungibleLimiter, Failure> {
        let d = &self.deps;
        let key = (
            token_table.unwrap_or(&d.tables.fungible_tokens).to_string(),
            limit_table.unwrap_or(&d.tables.limits).to_string(),
        );
        cached(&self.fungible, key, |key| {
            let mut limiter = FungibleLimiter::new(
                d.dynamo.clone(),
                &key.0,
                d.style,
                self.limit_store(Some(&key.1))?,
                d.clock.clone(),
            );
            for (resource, n) in shards_from_vars(&d.vars).map_err(shared::Error::from)? {
                limiter = limiter.with_shards(&resource, n);
            }
            Ok(limiter)
        })
    }

    /// The non-fungible limiter of these tables whose bound tokens live `token_ttl_secs`.
    pub fn non_fungible(
        &self,
        token_table: Option<&str>,
        index: Option<&str>,
        limit_table: Option<&str>,
        token_ttl_secs: Option<u64>,
    ) -> Result<NonFungibleLimiter, Failure> {
        let d = &self.deps;
        let key = (
            token_table
                .unwrap_or(&d.tables.non_fungible_tokens)
                .to_string(),
            index.unwrap_or(&d.tables.resource_index).to_string(),
            limit_table.unwrap_or(&d.tables.limits).to_string(),
            token_ttl_secs.unwrap_or(DEFAULT_TOKEN_TTL.as_secs()),
        );
        cached(&self.non_fungible, key, |key| {
            let mut limiter = NonFungibleLimiter::new(
                d.dynamo.clone(),
                &key.0,
                &key.1,
                d.style,
                self.limit_store(Some(&key.2))?,
                d.clock.clone(),
            );
            if key.3 != DEFAULT_TOKEN_TTL.as_secs() {
                limiter = limiter.with_ttls(DEFAULT_RESERVATION_TTL, Duration::from_secs(key.3));
            }
            Ok(limiter)
        })
    }
}

/// `Deps::from_env`, except that `AWS_ENDPOINT_URL` (what boto3 users set for DynamoDB Local)
/// counts as the DynamoDB endpoint too, and the client may carry a call counter.
async fn deps_from_env(vars: Vars, counter: Option<&CallCounter>) -> Result<Deps, Failure> {
    let local = ENDPOINT_VARS
        .iter()
        .find_map(|v| vars.get(v))
        .filter(|url| shared::dynamo::wants_local_credentials(url, &vars));
    let dynamo = match local {
        Some(url) => shared::dynamo::local_client(&url, counter),
        None => shared::dynamo::client(&aws_config_load().await, counter),
    };
    Ok(Deps {
        dynamo,
        tables: TableNames::from_vars(&vars).map_err(shared::Error::from)?,
        style: AttributeStyle::from_vars(&vars).map_err(shared::Error::from)?,
        clock: shared::clock::system(),
        vars,
        function: None,
    })
}

async fn aws_config_load() -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .load()
        .await
}

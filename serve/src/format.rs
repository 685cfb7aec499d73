//! `granary format`: creates the schema and root directory of each object export a
//! configuration names (a first start of a head does the same; this does it up front,
//! and says what it found).

#[cfg(feature = "object")]
use crate::config::BackendConfig;
use crate::config::ServerConfig;

/// Formats every object export of `config`; returns one line per export for the person
/// who ran it.
///
/// # Errors
/// No object export in the config, credentials missing, or an engine unreachable: said
/// with the export's path and what to fix.
#[cfg(feature = "object")]
pub fn format(config: &ServerConfig) -> Result<Vec<String>, String> {
    let mut said = Vec::new();
    for e in &config.exports {
        let BackendConfig::Object {
            postgres,
            store,
            credentials,
            gc,
            lock_lease,
        } = &e.backend
        else {
            continue;
        };
        let object = backend_object::ObjectConfig {
            postgres: postgres.0.clone(),
            store: store.clone(),
            credentials: backend_object::Credentials::load(credentials.as_deref())
                .map_err(|m| format!("export {}: {m}", e.path))?,
            gc: *gc,
            lock_lease: *lock_lease,
        };
        let clock: std::sync::Arc<dyn gtime::Clock> =
            std::sync::Arc::new(gtime::SystemClock::new());
        let made = backend_object::format(&object, clock)
            .map_err(|m| format!("export {}: {m}", e.path))?;
        said.push(if made {
            format!(
                "export {}: created the schema and the root directory",
                e.path
            )
        } else {
            format!("export {}: already formatted; nothing changed", e.path)
        });
    }
    if said.is_empty() {
        return Err(
            "the config names no export with backend = \"object\"; nothing to format".into(),
        );
    }
    Ok(said)
}

/// A server built without the `object` feature has nothing to format.
///
/// # Errors
/// Always: says how to build a granary that formats object exports.
#[cfg(not(feature = "object"))]
pub fn format(_config: &ServerConfig) -> Result<Vec<String>, String> {
    Err(
        "granary format sets up object exports, and this granary was built without the \
         object feature (--no-default-features); rebuild with `cargo build --release \
         --features object`"
            .into(),
    )
}

//! Standalone: redis' `ConnectionManager`, which reconnects to the one server
//! and resubscribes, plus what the near connections are made from.

use redis::AsyncConnectionConfig;
use redis::PushInfo;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;

use super::near::Maker;
use crate::config::Config;
use crate::error::LockError;

/// The client's own connection to the server `config` names, and the maker
/// of its near connections. Push frames go to `pushes`.
pub(super) async fn connect(
    config: &Config,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<(ConnectionManager, Maker), LockError> {
    let client = redis::Client::open(config.connection_info()?)
        .map_err(|e| LockError::Config(format!("{e}")))?;
    let maker = Maker::Standalone {
        client: client.clone(),
        config: AsyncConnectionConfig::new()
            .set_connection_timeout(Some(config.connect_timeout))
            .set_response_timeout(Some(config.response_timeout)),
    };
    let manager_config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.response_timeout))
        .set_number_of_retries(3)
        .set_push_sender(pushes)
        .set_automatic_resubscription();
    let manager = ConnectionManager::new_with_config(client, manager_config).await?;
    Ok((manager, maker))
}

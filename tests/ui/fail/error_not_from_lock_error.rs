use lock_runtime::distributed_lock;

#[derive(Debug)]
struct ShopError;

#[distributed_lock(key = "order:<id>")]
async fn pay(id: u64) -> Result<u64, ShopError> {
    Ok(id)
}

fn main() {}

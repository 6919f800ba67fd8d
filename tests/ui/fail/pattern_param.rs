use lock_runtime::{LockError, distributed_lock};

struct Point {
    x: i64,
    y: i64,
}

#[distributed_lock(key = "point:<x>")]
async fn at(Point { x, y }: Point) -> Result<i64, LockError> {
    Ok(x + y)
}

fn main() {}

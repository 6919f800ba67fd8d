lock_runtime::segmented_lock! {
    const STOCK: (sku: u64) = "stock:<sku>", segments = 10;
}

fn main() {}

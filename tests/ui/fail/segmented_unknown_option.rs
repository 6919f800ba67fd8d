lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = "stock:<sku>", segments = 10, wait = "2s";
}

fn main() {}

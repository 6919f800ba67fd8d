lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = "stock:<sku>", segments = 0;
}

fn main() {}

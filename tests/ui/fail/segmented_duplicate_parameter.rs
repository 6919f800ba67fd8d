lock_runtime::segmented_lock! {
    static STOCK: (sku: u64, sku: u32) = "stock:<sku>", segments = 10;
}

fn main() {}

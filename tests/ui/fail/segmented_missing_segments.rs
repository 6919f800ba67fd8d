lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = "stock:<sku>";
}

fn main() {}

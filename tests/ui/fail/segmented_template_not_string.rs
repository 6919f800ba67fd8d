lock_runtime::segmented_lock! {
    static STOCK: (sku: u64) = stock, segments = 10;
}

fn main() {}

package leader

import "strconv"

// PartitionName returns the name of partition p under base: base + "/p" + p. [Shards] names each
// partition's election and fence resource this way.
func PartitionName(base string, p int) string { return base + "/p" + strconv.Itoa(p) }

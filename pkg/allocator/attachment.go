package allocator

// Attachment is one (containerID, ifname) the runtime still uses, as CNI's GC
// verb lists them in "cni.dev/valid-attachments".
type Attachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}

// Attachment is the attachment r is reserved for.
func (r *Record) Attachment() Attachment { return Attachment{r.ContainerID, r.IfName} }

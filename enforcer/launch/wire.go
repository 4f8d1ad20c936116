package launch

// wireSpec is what the parent sends stage 2 over the spec pipe (JSON).
type wireSpec struct {
	Path       string        `json:"path"`
	Args       []string      `json:"args"`
	Env        []string      `json:"env"`
	Dir        string        `json:"dir"`
	UID        uint32        `json:"uid"`
	GID        uint32        `json:"gid"`
	Groups     []uint32      `json:"groups"`
	NewNetNS   bool          `json:"new_netns"`
	IOURing    bool          `json:"io_uring"`
	ExtraFiles int           `json:"extra_files"`
	Landlock   *LandlockPlan `json:"landlock"`
	NoLandlock bool          `json:"no_landlock,omitempty"`
	Mask       []string      `json:"mask,omitempty"`
}

// envStage2 marks a stage-2 child; its value is "SPECFD,STATUSFD,GOFD".
const envStage2 = "_KLOCK_LAUNCH_STAGE2"

// stage2FailExit is stage 2's exit status when it fails before exec (the
// precise error travels over the status pipe).
const stage2FailExit = 125

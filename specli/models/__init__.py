"""Everything about model weights: where they come from (folders, hub ids, the embedded pair:
model_dirs, loading), EAGLE heads and their formats (eagle_head, head_formats), the memory a pair
needs and where it goes (memory, placement, plan), the caches the engine runs on (cached_lm,
static_cache, layer_stack) and specli's own forwards for drafter steps (own_forward/). Importing this
package imports nothing else: memory and model_dirs stay torch-free for `presets list`.
"""

"""Building blocks of the decoder: norms, rotary, attention (plain, latent), MLPs, experts."""
